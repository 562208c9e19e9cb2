//! Operator and module analysis of a fuseprof run (issue 4 fills this crate).
