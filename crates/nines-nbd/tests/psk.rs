//! The psktool file parser: psktool's own lines, every malformed line refused with its number,
//! and any text either parsed into keys that re-encode to the lines given or refused.

use nines_nbd::psk::{PSK_KEY_MAX_BYTES, PskError, PskKeys};
use proptest::prelude::*;

#[test]
fn psktool_lines_parse_to_their_keys() {
    // As `psktool -u alice -p keys.psk` writes (32 bytes of key, lower-case hex).
    let text =
        "alice:8a5b2b2bd4f6a3e5d0b6c7f1e2d3c4b5a69788796a5b4c3d2e1f00112233aabb\n\nbob:00FF\r\n";
    let k = PskKeys::parse(text).unwrap();
    assert_eq!(k.len(), 2);
    assert_eq!(
        k.key(b"alice").unwrap()[..4],
        [0x8a, 0x5b, 0x2b, 0x2b],
        "hex decoded"
    );
    assert_eq!(k.key(b"alice").unwrap().len(), 32);
    assert_eq!(k.key(b"bob"), Some(&[0x00, 0xff][..]));
    assert_eq!(k.key(b"carol"), None);
}

#[test]
fn malformed_lines_are_refused_with_their_number() {
    let long_key = format!("a:{}", "00".repeat(PSK_KEY_MAX_BYTES + 1));
    let cases: [(&str, PskError); 8] = [
        ("", PskError::Empty),
        ("\n  \n", PskError::Empty),
        ("a:00\nnocolon\n", PskError::NoColon { line: 2 }),
        (":00", PskError::EmptyIdentity { line: 1 }),
        ("a:0", PskError::BadHex { line: 1 }),
        ("a:zz", PskError::BadHex { line: 1 }),
        ("a:", PskError::EmptyKey { line: 1 }),
        (
            "a:00\nb:01\na:02",
            PskError::Duplicate {
                line: 3,
                identity: "a".into(),
            },
        ),
    ];
    for (text, want) in cases {
        assert_eq!(PskKeys::parse(text), Err(want), "{text:?}");
    }
    assert_eq!(
        PskKeys::parse(&long_key),
        Err(PskError::KeyTooLong { line: 1 })
    );
    assert_eq!(
        PskKeys::parse(&format!("{}:00", "u".repeat(129))),
        Err(PskError::IdentityTooLong { line: 1 })
    );
    // The reason says how to fix it.
    assert!(
        PskError::BadHex { line: 4 }
            .to_string()
            .contains("line 4: the key is not hexadecimal")
    );
}

proptest! {
    /// Any text: parsed or refused, never a panic; what parses holds only non-empty keys.
    #[test]
    fn any_text_parses_or_is_refused(text in ".{0,200}") {
        if let Ok(k) = PskKeys::parse(&text) {
            prop_assert!(!k.is_empty());
        }
    }

    /// Lines written as psktool writes them parse back to exactly those keys.
    #[test]
    fn written_keys_parse_back(entries in proptest::collection::btree_map("[a-zA-Z0-9_.@-]{1,40}",
                                        proptest::collection::vec(any::<u8>(), 1..64), 1..8),
                               upper: bool) {
        let mut text = String::new();
        for (id, key) in &entries {
            let hex: String = key.iter().map(|b| if upper { format!("{b:02X}") } else { format!("{b:02x}") }).collect();
            text.push_str(&format!("{id}:{hex}\n"));
        }
        let k = PskKeys::parse(&text).unwrap();
        prop_assert_eq!(k.len(), entries.len());
        for (id, key) in &entries {
            prop_assert_eq!(k.key(id.as_bytes()), Some(key.as_slice()));
        }
    }
}
