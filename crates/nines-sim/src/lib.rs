//! nines-sim (being built).
