//! nines-flash (being built).
