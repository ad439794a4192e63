//! Limits on the files a workflow names (its own nested files, its plugins): regular files only,
//! of bounded size. A path may name anything — `/dev/zero`, a named pipe, a log of many GiB —
//! and reading one of those whole would never end or would exhaust memory.

use std::io::Read;
use std::path::Path;

use super::MIB;

/// The largest workflow file weft reads: 16 MiB.
pub(crate) const MAX_WORKFLOW_FILE_BYTES: u64 = 16 * MIB;

/// The largest plugin component weft reads: 256 MiB.
pub(crate) const MAX_PLUGIN_FILE_BYTES: u64 = 256 * MIB;

/// The bytes of the regular file at `path`; an error when it is anything else (a device, a
/// pipe, a socket, a directory) or longer than `max` bytes.
pub(crate) fn read_at_most(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_regular(path, max, false)
}

/// [`read_at_most`] of a file weft wrote itself (a cache entry): a symbolic link there is
/// refused too, not followed, as something weft never makes.
pub(crate) fn read_own_at_most(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_regular(path, max, true)
}

/// The bytes of the regular file at `path`, at most `max`; with `no_links`, a symbolic link at
/// `path` is an error.
fn read_regular(path: &Path, max: u64, no_links: bool) -> std::io::Result<Vec<u8>> {
    // Opened without blocking, so a named pipe with no writer is refused instead of waited on;
    // what is opened is checked, not what the path named a moment before.
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut flags = rustix::fs::OFlags::NONBLOCK;
        if no_links {
            flags |= rustix::fs::OFlags::NOFOLLOW;
        }
        options.custom_flags(i32::try_from(flags.bits()).unwrap_or_default());
    }
    let file = options.open(path).map_err(|e| {
        if no_links && e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it is a symbolic link, which weft never writes there",
            )
        } else {
            e
        }
    })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it is not a regular file (a device, a pipe or a directory)",
        ));
    }
    let too_large = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            if max >= MIB {
                format!("it is larger than {} MiB, the most weft reads", max / MIB)
            } else {
                format!("it is larger than {max} bytes, the most weft reads")
            },
        )
    };
    if meta.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or_default());
    // The length read may differ from the length stated (a file still growing, /proc).
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_up_to_the_limit_are_read_and_nothing_else() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").expect("write");
        assert_eq!(read_at_most(&path, 5).expect("read"), b"12345");
        let err = read_at_most(&path, 4).expect_err("too large");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        for other in [Path::new("/dev/zero"), dir.path()] {
            let err = read_at_most(other, MIB).expect_err("not a file");
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert_eq!(read_at_most(&link, 5).expect("followed"), b"12345");
        let err = read_own_at_most(&link, 5).expect_err("a link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(read_own_at_most(&path, 5).expect("read"), b"12345");
        let err = read_own_at_most(&path, 4).expect_err("too large");
        assert!(err.to_string().contains("larger than 4 bytes"), "{err}");
    }
}
