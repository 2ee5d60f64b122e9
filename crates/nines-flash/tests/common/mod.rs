//! Helpers shared by the model's integration tests.
#![allow(dead_code)]

use nines_flash::DeviceConfig;

/// A small device for exact checks: `dies` dies on `channels` channels.
pub fn small(channels: u32, dies_per_chip: u32, op: f64) -> DeviceConfig {
    let text = format!(
        r#"
name = "test"
[geometry]
channels = {channels}
chips_per_channel = 1
dies_per_chip = {dies_per_chip}
planes_per_die = 1
blocks_per_plane = 256
pages_per_block = 64
page_size_bytes = 4096
map_unit_bytes = 4096
[timing]
read_ns = 50_000
program_ns = 500_000
erase_ns = 2_000_000
channel_bytes_per_s = 400_000_000
[ftl]
over_provisioning = {op}
gc_soft_threshold = 0.02
gc_hard_threshold = 0.01
[controller]
overhead_ns = 3_000
read_bytes_per_s = 2_000_000_000
write_bytes_per_s = 1_000_000_000
"#
    );
    DeviceConfig::from_toml(&text, "test").unwrap()
}

/// The tests' own pseudo-random stream (a 64-bit LCG; its high bits are used), independent
/// of the model's.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 20
    }

    /// A 4 KiB-aligned offset below `bytes`.
    pub fn offset_4k(&mut self, bytes: u64) -> u64 {
        self.next() % (bytes / 4096) * 4096
    }
}
