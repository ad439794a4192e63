//! Several consecutive records of one run stored as one sled value: a checkpoint moves the
//! records a run wrote since the last one into sled with one insert rather than one each.
//!
//! A chunk is stored under the key of its first record and is `CHUNK | count: u32 BE |
//! (seq: u64 BE | sub: u32 BE | len: u32 BE | bytes)*`. A record stored alone is its bytes, as
//! before chunks existed. A record is a MessagePack map, or a JSON object before format 7 (its
//! first byte `0x80` to `0x8f`, `0xde`, `0xdf` or `{`), and never starts with [`CHUNK`]; nor
//! does a run's first value kept among its records (`keys::first`: it starts with a digest's
//! length, 64, as a u32 BE).
//! Since format 6 a chunk (or a record alone) of `values::INLINE_BELOW` bytes or more is kept in
//! a values file, sled holding its ref (`values`).

use crate::store::RecordKey;

/// The first byte of a chunk.
const CHUNK: u8 = 0x01;

/// The most bytes of records one chunk gathers; a larger record is stored alone.
pub(super) const MAX_CHUNK: usize = 1 << 20;

/// A chunk's head: [`CHUNK`] and the count.
const HEAD: usize = 5;

/// A record's head in a chunk: seq, sub and len.
const ENTRY_HEAD: usize = 16;

/// The most bytes a record of `len` bytes takes in a chunk, a chunk's head included.
pub(super) fn room(len: usize) -> usize {
    HEAD + ENTRY_HEAD + len
}

/// The value holding `records` (in order, at least one): the record itself when alone.
pub(super) fn encode(records: &[(RecordKey, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(records, &mut out);
    out
}

/// [`encode`], appended to `out`.
pub(super) fn encode_into(records: &[(RecordKey, &[u8])], out: &mut Vec<u8>) {
    if let [(_, bytes)] = records {
        out.extend_from_slice(bytes);
        return;
    }
    let size: usize = records.iter().map(|(_, b)| ENTRY_HEAD + b.len()).sum();
    out.reserve(HEAD + size);
    out.push(CHUNK);
    // At most MAX_CHUNK bytes of records, so far fewer than u32::MAX of them.
    out.extend_from_slice(
        &u32::try_from(records.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    for ((seq, sub), bytes) in records {
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&sub.to_be_bytes());
        // A record over 4 GiB is refused by the log before it gets here.
        out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(bytes);
    }
}

/// The records of the value stored under the record key `at`; `None` when it is a chunk that
/// does not read back.
pub(super) fn decode(at: RecordKey, value: &[u8]) -> Option<Vec<(RecordKey, Vec<u8>)>> {
    let Some((&CHUNK, rest)) = value.split_first() else {
        return Some(vec![(at, value.to_vec())]);
    };
    let count = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let mut rest = &rest[4..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (key, bytes, after) = entry(rest)?;
        out.push((key, bytes.to_vec()));
        rest = after;
    }
    (out.len() == count && out.first().map(|(k, _)| *k) == Some(at)).then_some(out)
}

/// The first record of the value stored under the record key `at`, without reading the
/// others; `None` when it is a chunk whose first record does not read back or is not `at`'s.
pub(super) fn first(at: RecordKey, value: &[u8]) -> Option<&[u8]> {
    let Some((&CHUNK, rest)) = value.split_first() else {
        return Some(value);
    };
    let (key, bytes, _) = entry(rest.get(4..)?)?;
    (key == at).then_some(bytes)
}

/// The chunk entry `rest` starts with (`seq | sub | len | bytes`): its key, its bytes, and
/// what follows it.
fn entry(rest: &[u8]) -> Option<(RecordKey, &[u8], &[u8])> {
    let seq = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let sub = u32::from_be_bytes(rest.get(8..12)?.try_into().ok()?);
    let len = u32::from_be_bytes(rest.get(12..16)?.try_into().ok()?) as usize;
    let end = 16usize.checked_add(len)?;
    Some(((seq, sub), rest.get(16..end)?, rest.get(end..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_record_is_stored_as_it_is() {
        let value = encode(&[((3, 1), b"{\"a\":1}")]);
        assert_eq!(value, b"{\"a\":1}");
        assert_eq!(decode((3, 1), &value), Some(vec![((3, 1), value.clone())]));
    }

    #[test]
    fn a_chunk_reads_back_every_record_in_order() {
        let records: Vec<(RecordKey, &[u8])> =
            vec![((1, 0), b"{}"), ((4, 1), b""), ((4, 2), b"{\"x\":[1,2]}")];
        let value = encode(&records);
        let back = decode((1, 0), &value).expect("decodes");
        let expected: Vec<(RecordKey, Vec<u8>)> =
            records.iter().map(|(k, b)| (*k, b.to_vec())).collect();
        assert_eq!(back, expected);
    }

    #[test]
    fn the_first_record_reads_alone_from_a_chunk_or_a_lone_record() {
        let value = encode(&[((0, 0), b"first"), ((1, 0), b"{}")]);
        assert_eq!(first((0, 0), &value), Some(&b"first"[..]));
        assert_eq!(first((0, 0), b"alone"), Some(&b"alone"[..]));
        // Under another key than its first record's, or cut inside that record.
        assert_eq!(first((1, 0), &value), None);
        assert_eq!(first((0, 0), &value[..20]), None);
    }

    #[test]
    fn a_damaged_chunk_is_refused() {
        let value = encode(&[((1, 0), b"{}"), ((2, 1), b"{}")]);
        for cut in 1..value.len() {
            assert_eq!(decode((1, 0), &value[..cut]), None, "cut at {cut}");
        }
        // Stored under a key that is not its first record's.
        assert_eq!(decode((9, 9), &value), None);
    }
}
