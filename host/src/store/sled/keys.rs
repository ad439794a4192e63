//! Keys of the record tree: `kind | len(id) as u32 BE | id [| seq u64 BE | sub u32 BE]`.
//!
//! The id is length-prefixed, so no id is a prefix of another's keys and no byte in an id (a
//! NUL, say) can make one run's key land among another run's: a run's keys are exactly those
//! that start with its prefix, whatever the ids, even ones that [`crate::run_id`] would refuse.

use crate::store::RecordKey;

/// The latest snapshot of a run.
pub(super) const SNAPSHOT: u8 = b's';
/// The run's first value (its definition digest and first state, [`first`]) under a key of its
/// own, as format 4 stored it; format 5 stores it as the run's record at [`FIRST_AT`].
pub(super) const FIRST: u8 = b'f';
/// Where format 5 keeps a run's first value among its records: before all of them (a record's
/// seq is at least 1), so a checkpoint writes it into sled with the run's first records, as one
/// chunk, rather than with an insert of its own.
pub(super) const FIRST_AT: RecordKey = (0, 0);
/// The first state of a run written before format 4.
pub(super) const BASE: u8 = b'b';
/// The digest of a run's definition written before format 4.
pub(super) const DEFINITION: u8 = b'd';
/// A run's summary.
pub(super) const SUMMARY: u8 = b'r';
/// A run's records.
pub(super) const RECORD: u8 = b't';
/// The listing's index of every run in creation order: `c | created_at | id`, its value the
/// run's workflow id, so a page of one workflow's runs reads no summary it leaves out.
pub(super) const CREATED: u8 = b'c';

/// The index of runs by the definition they follow: `u | len(digest) as u32 BE | digest | id`,
/// with an empty value, so that a prune tells a definition no run names (format 10).
pub(super) const USES: u8 = b'u';

/// Run `id`'s key in the index of runs by definition ([`USES`]): the digest's prefix, then the
/// id.
pub(super) fn uses_key(digest: &str, id: &str) -> Vec<u8> {
    let mut k = key(USES, digest);
    k.extend_from_slice(id.as_bytes());
    k
}

/// The index of runs by tag, in creation order: `g | len(key) as u32 BE | key | len(value) as
/// u32 BE | value | created_at | id`, its value the run's workflow id, as [`CREATED`]'s.
pub(super) const TAGGED: u8 = b'g';

/// The prefix of the index entries of the runs tagged `key: value`.
pub(super) fn tag_prefix(key: &str, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + 8 + key.len() + value.len());
    k.push(TAGGED);
    for part in [key, value] {
        // Tags are short (`store::MAX_TAG_VALUE`); saturate anyway.
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        k.extend_from_slice(&len.to_be_bytes());
        k.extend_from_slice(part.as_bytes());
    }
    k
}

/// The key of run `id` (made at `created_at`) under `prefix`, an index in creation order: the
/// prefix, the time as 8 bytes that sort as the signed number does, then the id.
pub(super) fn indexed_key(prefix: &[u8], created_at: i64, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 8 + id.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(&sortable(created_at));
    k.extend_from_slice(id.as_bytes());
    k
}

/// The creation time and id of `k`, a key under `prefix` of an index in creation order.
pub(super) fn split_indexed_key<'k>(prefix: &[u8], k: &'k [u8]) -> Option<(i64, &'k str)> {
    let rest = k.strip_prefix(prefix)?;
    let at: [u8; 8] = rest.get(..8)?.try_into().ok()?;
    let at = (u64::from_be_bytes(at) ^ (1 << 63)) as i64;
    Some((at, std::str::from_utf8(rest.get(8..)?).ok()?))
}

/// A key past every key under `prefix` of an index in creation order (an id is ASCII, so it
/// never starts with `0xff`).
pub(super) fn index_end(prefix: &[u8]) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&[0xff; 9]);
    k
}

/// Run `id`'s key in the listing index: [`CREATED`], the creation time as 8 bytes that sort as
/// the signed number does, then the id (last, so it needs no length: the kind and the time are
/// of fixed length), so the index sorts by time, then id, as the listing does (reversed).
pub(super) fn listing_key(created_at: i64, id: &str) -> Vec<u8> {
    indexed_key(&[CREATED], created_at, id)
}

/// `n` as 8 bytes whose order is the order of the signed numbers.
fn sortable(n: i64) -> [u8; 8] {
    ((n as u64) ^ (1 << 63)).to_be_bytes()
}

/// The key of a run's single entry of `kind`; also the prefix of its records.
pub(super) fn key(kind: u8, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + 4 + id.len() + 12);
    k.push(kind);
    // An id longer than u32::MAX bytes cannot exist in memory here; saturate anyway.
    let len = u32::try_from(id.len()).unwrap_or(u32::MAX);
    k.extend_from_slice(&len.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// A run's first value: `len(digest) as u32 BE | digest | first state`, the digest naming the
/// definition's blob.
pub(super) fn first(digest: &str, base: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + digest.len() + base.len());
    // A digest is 64 hex digits; saturate anyway, and the value reads back as damaged.
    let len = u32::try_from(digest.len()).unwrap_or(u32::MAX);
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(digest.as_bytes());
    v.extend_from_slice(base);
    v
}

/// The definition digest and the first state of a run's first value; `None` when it is damaged.
pub(super) fn split_first(v: &[u8]) -> Option<(&str, &[u8])> {
    let len = u32::from_be_bytes(v.get(..4)?.try_into().ok()?) as usize;
    let digest = v.get(4..4usize.checked_add(len)?)?;
    let base = v.get(4 + len..)?;
    Some((std::str::from_utf8(digest).ok()?, base))
}

/// The key of one record of a run.
pub(super) fn record_key(id: &str, (seq, sub): RecordKey) -> Vec<u8> {
    let mut k = key(RECORD, id);
    k.extend_from_slice(&seq.to_be_bytes());
    k.extend_from_slice(&sub.to_be_bytes());
    k
}

/// The record key of `k`, a key under `prefix` (the run's record prefix).
pub(super) fn parse_record_key(prefix: &[u8], k: &[u8]) -> Option<RecordKey> {
    let rest = k.get(prefix.len()..)?;
    if rest.len() != 12 {
        return None;
    }
    let seq = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let sub = u32::from_be_bytes(rest.get(8..12)?.try_into().ok()?);
    Some((seq, sub))
}

/// The run prefix and record key of `k` when it is a record's key.
pub(super) fn split_record_key(k: &[u8]) -> Option<(&[u8], RecordKey)> {
    if k.first() != Some(&RECORD) {
        return None;
    }
    let len = u32::from_be_bytes(k.get(1..5)?.try_into().ok()?) as usize;
    let prefix = k.get(..5usize.checked_add(len)?)?;
    Some((prefix, parse_record_key(prefix, k)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_id_aliases_another() {
        // The old layout `kind | id | 0 | seq | sub` let `victim\0zz` write into `victim`'s log.
        let victim = key(RECORD, "victim");
        for other in ["victim\u{0}zz", "victim\u{0}", "victi", "victimx", ""] {
            let k = record_key(other, (7, 1));
            assert!(
                !k.starts_with(&victim),
                "{other:?} lands among victim's records"
            );
            assert_eq!(parse_record_key(&key(RECORD, other), &k), Some((7, 1)));
        }
        assert_ne!(key(SUMMARY, "a"), key(SUMMARY, "a\u{0}"));
    }

    #[test]
    fn a_record_key_splits_into_its_run_prefix_and_key() {
        let k = record_key("run-1", (5, 2));
        assert_eq!(
            split_record_key(&k),
            Some((&key(RECORD, "run-1")[..], (5, 2)))
        );
        assert_eq!(split_record_key(&key(SUMMARY, "run-1")), None);
        assert_eq!(split_record_key(&key(RECORD, "run-1")), None);
        assert_eq!(split_record_key(&k[..k.len() - 1]), None);
    }

    #[test]
    fn a_first_value_splits_into_its_digest_and_state() {
        let v = first("ab12", b"{\"x\":1}");
        assert_eq!(split_first(&v), Some(("ab12", &b"{\"x\":1}"[..])));
        assert_eq!(split_first(&first("", b"")), Some(("", &b""[..])));
        // Cut short, or a length past the end: damaged, not a shorter state.
        assert_eq!(split_first(&v[..6]), None);
        assert_eq!(split_first(&v[..3]), None);
        let mut long = v.clone();
        long[3] = 200;
        assert_eq!(split_first(&long), None);
    }

    #[test]
    fn listing_keys_sort_by_time_then_id_and_split_back() {
        let ordered = [
            (-5, "z"),
            (0, "a"),
            (1, "a"),
            (1, "ab"),
            (1, "b"),
            (256, "a"),
        ];
        let keys: Vec<_> = ordered
            .iter()
            .map(|(at, id)| listing_key(*at, id))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        for ((at, id), k) in ordered.iter().zip(&keys) {
            assert_eq!(split_indexed_key(&[CREATED], k), Some((*at, *id)));
        }
        assert_eq!(split_indexed_key(&[CREATED], &key(SUMMARY, "a")), None);
        assert_eq!(split_indexed_key(&[CREATED], &[CREATED, 0, 1]), None);
        // A tag's entries sort the same way, under a prefix no other tag's starts with.
        let team = tag_prefix("team", "a");
        let k = indexed_key(&team, 5, "r");
        assert_eq!(split_indexed_key(&team, &k), Some((5, "r")));
        assert!(k < index_end(&team) && k > team);
        assert!(!indexed_key(&tag_prefix("team", "ab"), 5, "r").starts_with(&team));
        assert!(indexed_key(&tag_prefix("team", "ab"), 5, "r") > index_end(&team));
    }

    #[test]
    fn records_sort_by_seq_then_sub() {
        let a = record_key("r", (1, 9));
        let b = record_key("r", (2, 0));
        let c = record_key("r", (2, 1));
        assert!(a < b && b < c);
    }
}
