//! nines-host (being built).
