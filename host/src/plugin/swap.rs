//! Whether this process's memory may be swapped out: wasmtime 48's `PAGEMAP_SCAN` reset of a
//! freed linear memory is safe only where it may not (see `engine::pagemap_scan_safe`).

use std::path::Path;

/// Whether a page of this process may be swapped out: a swap area is active (or `/proc/swaps`
/// cannot be read) and neither the process's cgroup (v2) nor one of its ancestors sets
/// `memory.swap.max` to 0. Always false on other systems, where wasmtime has no scan anyway.
pub(crate) fn possible() -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    possible_with(
        read(Path::new("/proc/swaps")).as_deref(),
        read(Path::new("/proc/self/cgroup")).as_deref(),
        |cgroup| {
            read(
                &Path::new("/sys/fs/cgroup")
                    .join(cgroup)
                    .join("memory.swap.max"),
            )
        },
    )
}

/// [`possible`] from the text of `/proc/swaps` and `/proc/self/cgroup` (`None`: unreadable),
/// and `swap_max`, which reads the `memory.swap.max` of a cgroup path (relative to the
/// hierarchy's root).
fn possible_with(
    swaps: Option<&str>,
    cgroup: Option<&str>,
    swap_max: impl Fn(&str) -> Option<String>,
) -> bool {
    // The first line is the header.
    let areas = swaps.is_none_or(|text| text.lines().skip(1).any(|l| !l.trim().is_empty()));
    areas && !forbidden_by_cgroup(cgroup, swap_max)
}

/// Whether the process's cgroup v2 (the `0::PATH` line of `/proc/self/cgroup`) or one of its
/// ancestors allows no swap: the kernel then swaps none of its pages.
fn forbidden_by_cgroup(cgroup: Option<&str>, swap_max: impl Fn(&str) -> Option<String>) -> bool {
    let Some(path) = cgroup.and_then(|text| text.lines().find_map(|l| l.strip_prefix("0::")))
    else {
        return false;
    };
    // The cgroup itself, then each ancestor up to the root ("").
    let mut at = Some(path.trim().trim_start_matches('/'));
    while let Some(path) = at {
        if swap_max(path).is_some_and(|max| max.trim() == "0") {
            return true;
        }
        at = (!path.is_empty()).then(|| path.rsplit_once('/').map_or("", |(parent, _)| parent));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
    const SWAP_FILE: &str = "/swapfile\t\t\t\tfile\t\t2097148\t\t0\t\t-2\n";
    const ZRAM: &str = "/dev/zram0\t\t\t\tpartition\t1048572\t\t512\t\t100\n";

    fn no_cgroup_file(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn swap_is_possible_when_an_area_is_listed_or_the_list_cannot_be_read() {
        assert!(!possible_with(Some(HEADER), None, no_cgroup_file));
        assert!(possible_with(
            Some(&format!("{HEADER}{SWAP_FILE}")),
            None,
            no_cgroup_file
        ));
        assert!(possible_with(
            Some(&format!("{HEADER}{ZRAM}")),
            None,
            no_cgroup_file
        ));
        assert!(possible_with(None, None, no_cgroup_file), "cannot tell");
    }

    #[test]
    fn a_cgroup_or_an_ancestor_with_no_swap_allowed_rules_it_out() {
        let swaps = format!("{HEADER}{SWAP_FILE}");
        let cgroup = "0::/system.slice/weft.service\n";
        let max_at = |at: &'static str, max: &'static str| {
            move |path: &str| (path == at).then(|| max.to_owned())
        };
        for at in ["system.slice/weft.service", "system.slice", ""] {
            assert!(
                !possible_with(Some(&swaps), Some(cgroup), max_at(at, "0\n")),
                "memory.swap.max 0 at {at:?}"
            );
        }
        assert!(possible_with(
            Some(&swaps),
            Some(cgroup),
            max_at("system.slice/weft.service", "max\n")
        ));
        assert!(possible_with(
            Some(&swaps),
            Some(cgroup),
            max_at("other.slice", "0\n")
        ));
        // cgroup v1 only: no `0::` line.
        let v1 = "4:memory:/system.slice/weft.service\n";
        assert!(possible_with(Some(&swaps), Some(v1), max_at("", "0\n")));
    }
}
