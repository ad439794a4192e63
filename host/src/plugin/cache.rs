//! Content digests, pins, engine fingerprints and the on-disk cache of compiled components.
//!
//! A cache entry is `<digest>-<fingerprint>.cwasm` (wasmtime's serialized component: native code)
//! with `<digest>-<fingerprint>.cwasm.mac` next to it: the hex HMAC-SHA256, under the host's
//! secret [`CacheKey`], of the component digest, the engine fingerprint and the artifact's bytes.
//! The key lives outside the cache directory (by default `<cache dir>.key`, so
//! `<home>/cache.key`), so whoever can write the cache but not read the key — a guest granted the
//! cache directory — cannot make the host execute native code of its own: an entry whose MAC does
//! not verify is recompiled and rewritten, like a missing, truncated or foreign one.

use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::limits::files::read_own_at_most;

/// Length of the cache key, in bytes.
const KEY_LEN: usize = 32;

/// What the MAC of an entry covers first: the format, so a MAC of another format never verifies.
const MAC_DOMAIN: &[u8] = b"weft-plugin-cache-mac-v1\0";

/// The longest MAC file read: a MAC is 64 hex digits; anything much longer is not one.
const MAX_MAC_BYTES: u64 = 1024;

/// The hex sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Normalizes a pin (`sha256:` prefix allowed, any case) to lower-case hex; `None` if malformed.
pub(crate) fn normalize_pin(pin: &str) -> Option<String> {
    let pin = pin.trim();
    let pin = pin.strip_prefix("sha256:").unwrap_or(pin);
    (pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| pin.to_ascii_lowercase())
}

/// A `Hasher` that feeds sha256, so wasmtime's compatibility hash becomes a stable name.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// A short hex name for everything about `engine` that decides whether a compiled artifact
/// loads into it (wasmtime version, target, tunables, features).
pub(crate) fn engine_fingerprint(engine: &Engine) -> String {
    use std::hash::Hash;
    let mut hasher = ShaHasher(Sha256::new());
    hasher.write(b"weft-plugin-cache-v1");
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..8])
}

/// The cache file of a component digest for an engine fingerprint.
pub(crate) fn artifact_path(dir: &Path, digest: &str, fingerprint: &str) -> PathBuf {
    dir.join(format!("{digest}-{fingerprint}.cwasm"))
}

/// The MAC file next to an artifact.
pub(crate) fn mac_path(artifact: &Path) -> PathBuf {
    let mut name = artifact.as_os_str().to_owned();
    name.push(".mac");
    PathBuf::from(name)
}

/// The secret key that authenticates cache entries, one per cache (a home's `cache.key`).
#[derive(Clone)]
pub(crate) struct CacheKey([u8; KEY_LEN]);

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheKey(..)")
    }
}

impl CacheKey {
    /// Reads the key at `path`, or creates it (random, mode 0600) when there is none. Hosts that
    /// race to create it all end up with the one that was linked into place first.
    pub(crate) fn load_or_create(path: &Path) -> std::io::Result<Self> {
        match Self::read(path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            other => return other,
        }
        let mut key = [0u8; KEY_LEN];
        getrandom::fill(&mut key)
            .map_err(|e| std::io::Error::other(format!("no randomness for the cache key: {e}")))?;
        let tmp = temp_path(path);
        let written = (|| {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&tmp)?;
            file.write_all(&key)?;
            file.sync_all()?;
            // A link never replaces an existing file: the first key in place wins.
            match std::fs::hard_link(&tmp, path) {
                Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => Err(err),
                _ => Ok(()),
            }
        })();
        let _ = std::fs::remove_file(&tmp);
        written?;
        Self::read(path)
    }

    fn read(path: &Path) -> std::io::Result<Self> {
        let bytes = std::fs::read(path)?;
        let key: [u8; KEY_LEN] = bytes.try_into().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} is not a cache key of {KEY_LEN} bytes; delete it and a new one is made",
                    path.display()
                ),
            )
        })?;
        Ok(Self(key))
    }

    /// The MAC of an entry: digest, fingerprint and bytes, each length-prefixed.
    fn mac(&self, digest: &str, fingerprint: &str, bytes: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(MAC_DOMAIN);
        for part in [digest.as_bytes(), fingerprint.as_bytes(), bytes] {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        mac
    }

    /// The hex MAC of an entry.
    fn sign(&self, digest: &str, fingerprint: &str, bytes: &[u8]) -> String {
        hex::encode(self.mac(digest, fingerprint, bytes).finalize().into_bytes())
    }

    /// True when `tag` (hex) is the MAC of the entry; compared in constant time.
    fn verify(&self, digest: &str, fingerprint: &str, bytes: &[u8], tag: &str) -> bool {
        hex::decode(tag.trim()).is_ok_and(|tag| {
            self.mac(digest, fingerprint, bytes)
                .verify_slice(&tag)
                .is_ok()
        })
    }
}

/// Where the cache key of `cache_dir` lives by default: `<cache dir>.key`, next to the directory
/// (not in it). `None` when the directory has no name (`/`).
pub(crate) fn default_key_path(cache_dir: &Path) -> Option<PathBuf> {
    let name = cache_dir.file_name()?;
    let mut key = name.to_owned();
    key.push(".key");
    Some(cache_dir.with_file_name(key))
}

/// The disk cache of one host: its directory and its key.
#[derive(Debug, Clone)]
pub(crate) struct DiskCache {
    pub(crate) dir: PathBuf,
    pub(crate) key_path: PathBuf,
    pub(crate) key: CacheKey,
    /// The largest artifact read back; a larger one is a miss, compiled again.
    pub(crate) max_entry_bytes: u64,
}

impl DiskCache {
    /// The cache in `dir` (created when missing) with the key at `key_path` (default
    /// [`default_key_path`] of the canonical directory, created when missing), reading back
    /// artifacts of at most `max_entry_bytes`.
    pub(crate) fn open(
        dir: &Path,
        key_path: Option<&Path>,
        max_entry_bytes: u64,
    ) -> std::io::Result<Self> {
        crate::home::create_dir(dir)?;
        // Canonical, so a cache reached through a link shares the key of its real place.
        let dir = dir.canonicalize()?;
        let key_path = match key_path {
            Some(path) => path.to_path_buf(),
            None => default_key_path(&dir).ok_or_else(|| {
                std::io::Error::other(format!(
                    "the cache directory {} has no name to put its key next to",
                    dir.display()
                ))
            })?,
        };
        let key = CacheKey::load_or_create(&key_path)?;
        Ok(Self {
            dir,
            key_path,
            key,
            max_entry_bytes,
        })
    }

    /// Loads the entry of `digest` for `engine` (whose fingerprint is `fingerprint`), after
    /// checking its MAC.
    pub(crate) fn read(
        &self,
        engine: &Engine,
        digest: &str,
        fingerprint: &str,
    ) -> Result<Component, Miss> {
        let artifact = artifact_path(&self.dir, digest, fingerprint);
        // Regular files only, never followed through a link, and bounded: a named pipe there
        // would hang the read, a link to `/dev/zero` would fill memory.
        let tag = match read_own_at_most(&mac_path(&artifact), MAX_MAC_BYTES) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
            Err(err) => return Err(Miss::Unusable(format!("cannot read its MAC: {err}"))),
        };
        let bytes = match read_own_at_most(&artifact, self.max_entry_bytes) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
            Err(err) => return Err(Miss::Unusable(format!("cannot read artifact: {err}"))),
        };
        if !self.key.verify(digest, fingerprint, &bytes, &tag) {
            return Err(Miss::Unusable(
                "its MAC does not verify (changed, truncated, or written with another key)".into(),
            ));
        }
        deserialize_own(engine, &bytes).map_err(|err| {
            Miss::Unusable(format!(
                "wasmtime refused it: {}",
                super::error::one_line(&err)
            ))
        })
    }

    /// Writes the entry of `digest` for an engine with `fingerprint`: the artifact, then its MAC
    /// (each atomically). Returns the artifact's path.
    pub(crate) fn write(
        &self,
        digest: &str,
        fingerprint: &str,
        bytes: &[u8],
    ) -> std::io::Result<PathBuf> {
        let artifact = artifact_path(&self.dir, digest, fingerprint);
        crate::home::create_dir(&self.dir)?;
        write_atomic(&artifact, bytes)?;
        write_atomic(
            &mac_path(&artifact),
            self.key.sign(digest, fingerprint, bytes).as_bytes(),
        )?;
        Ok(artifact)
    }
}

/// Why a cache entry was not used.
#[derive(Debug)]
pub(crate) enum Miss {
    /// No entry (or no MAC).
    Absent,
    /// The entry exists but is unusable; the text says why.
    Unusable(String),
}

/// Loads an artifact this host wrote: bytes from `Component::serialize`, either just now in
/// this process or read back from the cache after their checksum matched.
///
/// Never call it with other bytes.
pub(crate) fn deserialize_own(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` trusts its input to be an artifact wasmtime produced;
    // loading arbitrary bytes as machine code would be unsound. Both callers pass only such
    // artifacts: `DiskCache::read` passes the very buffer whose HMAC it just verified under the
    // host's secret key — a MAC only a holder of the key, i.e. a host that made the artifact
    // with `Component::serialize`, can produce for this digest and engine fingerprint — so
    // nothing can change between the check and the use; and `Plugin::variant` passes the output
    // of `Component::serialize` made a moment earlier in this process. wasmtime itself still
    // refuses an artifact made for other engine settings or another wasmtime version.
    #[allow(unsafe_code)]
    let loaded = unsafe { Component::deserialize(engine, bytes) };
    loaded
}

/// A temporary name next to `path`, unique in this process.
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    PathBuf::from(name)
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename).
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let result = (|| {
        let mut file = crate::home::create_file(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_normalized_or_refused() {
        let digest = sha256_hex(b"abc");
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(normalize_pin(&digest).as_deref(), Some(digest.as_str()));
        assert_eq!(
            normalize_pin(&format!("sha256:{}", digest.to_uppercase())).as_deref(),
            Some(digest.as_str())
        );
        assert_eq!(normalize_pin("3f1c"), None);
        assert_eq!(normalize_pin(&"g".repeat(64)), None);
    }

    #[test]
    fn cache_names_carry_digest_and_fingerprint() {
        let path = artifact_path(Path::new("/cache"), "abcd", "0123");
        assert_eq!(path, Path::new("/cache/abcd-0123.cwasm"));
        assert_eq!(mac_path(&path), Path::new("/cache/abcd-0123.cwasm.mac"));
        assert_eq!(
            default_key_path(Path::new("/home/w/cache")).as_deref(),
            Some(Path::new("/home/w/cache.key"))
        );
        assert_eq!(default_key_path(Path::new("/")), None);
    }

    #[test]
    fn fingerprints_differ_by_engine_settings() {
        let plain = Engine::new(&wasmtime::Config::new()).expect("engine");
        let mut fuel = wasmtime::Config::new();
        fuel.consume_fuel(true);
        let fuel = Engine::new(&fuel).expect("engine");
        assert_eq!(
            engine_fingerprint(&plain),
            engine_fingerprint(&plain.clone())
        );
        assert_ne!(engine_fingerprint(&plain), engine_fingerprint(&fuel));
        assert_eq!(engine_fingerprint(&plain).len(), 16);
    }

    #[test]
    fn keys_are_made_once_private_and_reused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cache.key");
        let made = CacheKey::load_or_create(&path).expect("made");
        let again = CacheKey::load_or_create(&path).expect("read back");
        assert_eq!(made.0, again.0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path)
                .expect("key file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, b"short").expect("spoil the key");
        let err = CacheKey::load_or_create(&path).expect_err("a spoiled key is refused");
        assert!(err.to_string().contains("delete it"), "{err}");
    }

    #[test]
    fn macs_bind_bytes_digest_and_fingerprint_to_the_key() {
        let key = CacheKey([7; KEY_LEN]);
        let tag = key.sign("d", "f", b"code");
        assert!(key.verify("d", "f", b"code", &tag));
        assert!(!key.verify("d", "f", b"code!", &tag));
        assert!(!key.verify("e", "f", b"code", &tag));
        assert!(!key.verify("d", "g", b"code", &tag));
        assert!(!CacheKey([8; KEY_LEN]).verify("d", "f", b"code", &tag));
        assert!(!key.verify("d", "f", b"code", &sha256_hex(b"code")));
        assert!(!key.verify("d", "f", b"code", "not hex"));
    }

    #[test]
    fn forged_corrupt_and_missing_entries_are_misses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = DiskCache::open(&dir.path().join("cache"), None, 1 << 20).expect("cache");
        assert!(
            dir.path().join("cache.key").is_file(),
            "the key is next to the cache"
        );
        let engine = Engine::new(&wasmtime::Config::new()).expect("engine");
        assert!(matches!(cache.read(&engine, "d", "f"), Err(Miss::Absent)));

        let artifact = cache.write("d", "f", b"not an artifact").expect("write");
        for written in [artifact.clone(), mac_path(&artifact)] {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&written)
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{}", written.display());
        }
        // The MAC verifies but wasmtime refuses the bytes: a miss, not a crash.
        assert!(matches!(
            cache.read(&engine, "d", "f"),
            Err(Miss::Unusable(_))
        ));

        // Other bytes with a MAC recomputed without the key: refused before wasmtime sees them.
        std::fs::write(&artifact, b"forged").expect("forge");
        std::fs::write(mac_path(&artifact), sha256_hex(b"forged")).expect("forge the MAC");
        match cache.read(&engine, "d", "f") {
            Err(Miss::Unusable(why)) => assert!(why.contains("MAC"), "{why}"),
            other => panic!("expected a MAC miss, got {:?}", other.map(|_| ())),
        }
    }

    /// `cache.read` of entry `d`/`f`, on a thread of its own: `None` when it has not returned
    /// within a minute (it hangs).
    fn read_or_hang(cache: &DiskCache) -> Option<Result<(), String>> {
        let cache = cache.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let engine = Engine::new(&wasmtime::Config::new()).expect("engine");
            let read = match cache.read(&engine, "d", "f") {
                Ok(_) => Ok(()),
                Err(Miss::Absent) => Err("absent".to_owned()),
                Err(Miss::Unusable(why)) => Err(why),
            };
            let _ = tx.send(read);
        });
        rx.recv_timeout(std::time::Duration::from_secs(60)).ok()
    }

    #[test]
    fn entries_that_are_pipes_links_devices_or_too_large_are_misses_not_hangs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = DiskCache::open(&dir.path().join("cache"), None, 1 << 20).expect("cache");
        let artifact = cache.write("d", "f", b"not an artifact").expect("write");
        let mac = mac_path(&artifact);
        let fifo = |path: &Path| {
            let _ = std::fs::remove_file(path);
            rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .expect("mkfifo");
        };
        // A named pipe with no writer, as the artifact and as its MAC.
        for pipe in [&artifact, &mac] {
            cache.write("d", "f", b"not an artifact").expect("write");
            fifo(pipe);
            let why = read_or_hang(&cache)
                .expect("the read returned")
                .expect_err("a miss");
            assert!(why.contains("not a regular file"), "{why}");
        }
        // A link to an endless device, and a device itself.
        for link in [&artifact, &mac] {
            cache.write("d", "f", b"not an artifact").expect("write");
            std::fs::remove_file(link).expect("remove");
            std::os::unix::fs::symlink("/dev/zero", link).expect("symlink");
            let why = read_or_hang(&cache)
                .expect("the read returned")
                .expect_err("a miss");
            assert!(why.contains("symbolic link"), "{why}");
        }
        // An artifact over the bound: not read, a miss.
        cache
            .write("d", "f", &vec![0; (1 << 20) + 1])
            .expect("write");
        let why = read_or_hang(&cache)
            .expect("the read returned")
            .expect_err("a miss");
        assert!(why.contains("larger than 1 MiB"), "{why}");
        // Written again, over whatever was there, the entry reads back.
        cache.write("d", "f", b"not an artifact").expect("write");
        let why = read_or_hang(&cache)
            .expect("the read returned")
            .expect_err("wasmtime refuses these bytes");
        assert!(why.contains("wasmtime refused it"), "{why}");
    }
}
