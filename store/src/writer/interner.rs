//! The writer's string table in memory: each string's id from its bytes.
//!
//! An import looks a name up for nearly every event, and a run's distinct names (an nsys export's
//! NVTX ranges each carry their op id) are tens of thousands to millions. A hash map of boxed
//! keys touches three scattered places per lookup (its bucket of pointer, length and id, then
//! the key's own allocation); here the table holds only 4-byte ids, each string's end is one
//! entry of an array, and the strings lie end to end in one buffer, so a lookup reads a bucket
//! from a table a sixth of the size and the candidate's bytes from one place.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

#[derive(Default)]
pub(super) struct Interner {
    /// Indexes into `ends` (a string's id less one), by the hash of its bytes.
    table: HashTable<u32>,
    /// Where each string ends in `bytes` (and the next begins).
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

impl Interner {
    /// The bytes of the string at index `i`.
    #[inline]
    fn get<'b>(ends: &[usize], bytes: &'b [u8], i: u32) -> &'b [u8] {
        let i = i as usize;
        let start = if i == 0 { 0 } else { ends[i - 1] };
        &bytes[start..ends[i]]
    }

    /// The index (id less one) of `key`, if it was added.
    #[inline]
    pub fn find(&self, key: &[u8]) -> Option<u32> {
        let hash = FxBuildHasher.hash_one(key);
        self.table
            .find(hash, |&i| Self::get(&self.ends, &self.bytes, i) == key)
            .copied()
    }

    /// Adds `key`, which [`Interner::find`] did not find, and returns its index.
    pub fn add(&mut self, key: &[u8]) -> u32 {
        let i = self.ends.len() as u32;
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
        let hash = FxBuildHasher.hash_one(key);
        let (ends, bytes) = (&self.ends, &self.bytes);
        self.table.insert_unique(hash, i, |&j| {
            FxBuildHasher.hash_one(Self::get(ends, bytes, j))
        });
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_string_keeps_the_index_it_was_added_at() {
        let mut t = Interner::default();
        assert_eq!(t.find(b""), None);
        // Enough strings to grow the table several times; many share a prefix and a length,
        // as an nsys export's "op, op_id = N" names do.
        let names: Vec<String> = (0..20_000)
            .map(|i| format!("aten::empty_strided, op_id = {}", 100_000 + i))
            .chain(["".to_string(), "a".to_string()])
            .collect();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(t.find(n.as_bytes()), None, "{n}");
            assert_eq!(t.add(n.as_bytes()), i as u32);
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(t.find(n.as_bytes()), Some(i as u32), "{n}");
        }
        assert_eq!(t.find(b"aten::empty_strided, op_id = 99999"), None);
        assert_eq!(t.find(b"aten::empty_strided, op_id = 1"), None);
    }
}
