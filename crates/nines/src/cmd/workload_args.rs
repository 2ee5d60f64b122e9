//! Workload options shared by `profile` and `sim` (being built).
