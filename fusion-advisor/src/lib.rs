//! Fusable-chain recognition and replacement proposals (a later issue fills this crate).
