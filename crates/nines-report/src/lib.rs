//! Turning reports into things people read: the text table, fio-compatible JSON, plots, HTML,
//! comparisons and spike detection.

pub mod axis;
pub mod compare;
pub mod decimate;
pub mod fio;
pub mod html;
pub mod intervals;
pub mod ojson;
pub mod plot;
pub mod run;
pub mod spikes;
pub mod sweep;
pub mod table;
pub mod time;
