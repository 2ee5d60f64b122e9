//! Turning reports into things people read: the text table, fio-compatible JSON, plots, HTML,
//! comparisons and spike detection.

pub mod axis;
pub mod fio;
pub mod plot;
pub mod spikes;
pub mod table;
