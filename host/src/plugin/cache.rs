//! Content digests, pins, engine fingerprints and the on-disk cache of compiled components.
//!
//! A cache entry is `<digest>-<fingerprint>.cwasm` (wasmtime's serialized component) with
//! `<digest>-<fingerprint>.cwasm.sha256` next to it (the hex sha256 of the `.cwasm`). An entry is
//! used only when its checksum matches and wasmtime accepts it; anything else (missing, truncated,
//! corrupt, foreign) is recompiled and rewritten.

use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

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

/// The checksum file next to an artifact.
pub(crate) fn checksum_path(artifact: &Path) -> PathBuf {
    let mut name = artifact.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// Why a cache entry was not used.
#[derive(Debug)]
pub(crate) enum Miss {
    /// No entry (or no checksum).
    Absent,
    /// The entry exists but is unusable; the text says why.
    Unusable(String),
}

/// Loads a cached artifact into `engine`, after checking its checksum.
pub(crate) fn read_artifact(engine: &Engine, artifact: &Path) -> Result<Component, Miss> {
    let sum_path = checksum_path(artifact);
    let expected = match std::fs::read_to_string(&sum_path) {
        Ok(text) => text.trim().to_ascii_lowercase(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
        Err(err) => return Err(Miss::Unusable(format!("cannot read checksum: {err}"))),
    };
    let bytes = match std::fs::read(artifact) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
        Err(err) => return Err(Miss::Unusable(format!("cannot read artifact: {err}"))),
    };
    let actual = sha256_hex(&bytes);
    if actual != expected {
        return Err(Miss::Unusable(format!(
            "checksum mismatch (file has {actual}, checksum says {expected})"
        )));
    }
    deserialize_own(engine, &bytes).map_err(|err| {
        Miss::Unusable(format!(
            "wasmtime refused it: {}",
            super::error::one_line(&err)
        ))
    })
}

/// Loads an artifact this host wrote: bytes from `Component::serialize`, either just now in
/// this process or read back from the cache after their checksum matched.
///
/// Never call it with other bytes.
pub(crate) fn deserialize_own(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` trusts its input to be an artifact wasmtime produced;
    // loading arbitrary bytes as machine code would be unsound. Both callers pass only such
    // artifacts: `read_artifact` passes the very buffer whose sha256 it just compared with the
    // checksum we wrote next to the file after `Component::serialize` (so nothing can change
    // between the check and the use), and `Plugin::variant` passes the output of
    // `Component::serialize` made a moment earlier in this process. The cache file name carries
    // the engine fingerprint, and wasmtime itself still refuses an artifact made for other engine
    // settings or another wasmtime version.
    #[allow(unsafe_code)]
    let loaded = unsafe { Component::deserialize(engine, bytes) };
    loaded
}

/// Writes an artifact and its checksum atomically (temporary file + rename each).
pub(crate) fn write_artifact(artifact: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = artifact
        .parent()
        .ok_or_else(|| std::io::Error::other("artifact path has no directory"))?;
    std::fs::create_dir_all(dir)?;
    write_atomic(artifact, bytes)?;
    write_atomic(&checksum_path(artifact), sha256_hex(bytes).as_bytes())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(
        ".tmp-{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let tmp = PathBuf::from(tmp_name);
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
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
        assert_eq!(
            checksum_path(&path),
            Path::new("/cache/abcd-0123.cwasm.sha256")
        );
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
    fn corrupt_truncated_and_missing_entries_are_misses() {
        let dir = std::env::temp_dir().join(format!("weft-cache-test-{}", std::process::id()));
        let engine = Engine::new(&wasmtime::Config::new()).expect("engine");
        let artifact = artifact_path(&dir, "d", "f");
        assert!(matches!(
            read_artifact(&engine, &artifact),
            Err(Miss::Absent)
        ));

        write_artifact(&artifact, b"not an artifact").expect("write");
        // Checksum matches but wasmtime refuses the bytes: a miss, not a crash.
        assert!(matches!(
            read_artifact(&engine, &artifact),
            Err(Miss::Unusable(_))
        ));

        std::fs::write(&artifact, b"not an artifac").expect("truncate");
        match read_artifact(&engine, &artifact) {
            Err(Miss::Unusable(why)) => assert!(why.contains("checksum"), "{why}"),
            other => panic!("expected a checksum miss, got {:?}", other.map(|_| ())),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
