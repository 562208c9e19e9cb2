//! The ratatui timeline explorer (a later issue fills this crate).
