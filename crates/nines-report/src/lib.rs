//! nines-report (being built).
