//! What a plugin may use: its `limits:` and `grants:` from the workflow file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::error::PluginError;

/// Default `limits.memory-mib`.
pub(crate) const DEFAULT_MEMORY_MIB: u64 = 128;
/// Default `limits.max-output-mib`.
pub(crate) const DEFAULT_MAX_OUTPUT_MIB: u64 = 8;
/// Default `limits.max-events`.
pub(crate) const DEFAULT_MAX_EVENTS: u64 = 100_000;

const MIB: u64 = 1024 * 1024;

/// A plugin's sandbox: how much it may use and what it may reach.
///
/// Deserializes from the `limits:` and `grants:` members of a plugin entry in a workflow file
/// (WORKFLOW-FORMAT.md §1). Nothing is granted unless listed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Sandbox {
    /// Resource limits per invocation.
    pub limits: Limits,
    /// What the plugin may reach outside its own memory.
    pub grants: Grants,
}

/// Resource limits of one invocation (`limits:`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Limits {
    /// Linear memory cap in MiB (default 128).
    pub memory_mib: Option<u64>,
    /// The attempt's deadline in milliseconds, unless the step sets its own (S15).
    pub timeout_ms: Option<u64>,
    /// Fuel units per invocation; unset means unmetered. Metered plugins run on a separate,
    /// slower engine.
    pub fuel: Option<u64>,
    /// Cap in MiB on the result JSON text and on each writer chunk (default 8).
    pub max_output_mib: Option<u64>,
    /// Cap on writer chunks + custom events + log lines per invocation (default 100 000).
    pub max_events: Option<u64>,
}

impl Limits {
    /// The memory cap in MiB, default filled.
    pub fn memory_mib(&self) -> u64 {
        self.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB)
    }

    /// The memory cap in bytes, default filled.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_mib().saturating_mul(MIB)
    }

    /// The output cap in MiB, default filled.
    pub fn max_output_mib(&self) -> u64 {
        self.max_output_mib.unwrap_or(DEFAULT_MAX_OUTPUT_MIB)
    }

    /// The output cap in bytes, default filled.
    pub fn max_output_bytes(&self) -> u64 {
        self.max_output_mib().saturating_mul(MIB)
    }

    /// The event cap, default filled.
    pub fn max_events(&self) -> u64 {
        self.max_events.unwrap_or(DEFAULT_MAX_EVENTS)
    }
}

/// What a plugin may reach (`grants:`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Grants {
    /// Host directories preopened in the guest.
    pub dirs: Vec<DirGrant>,
    /// Environment variables the guest sees, exactly these: each a value written in the
    /// workflow file, or a reference to a variable of the host's environment.
    pub env: BTreeMap<String, EnvValue>,
    /// Hosts the guest may send HTTP requests to (`api.example.com`, `api.example.com:8443`,
    /// `*.example.com`). A host without a port allows any port.
    pub http: Vec<String>,
}

/// The value of a granted environment variable (`grants.env`).
///
/// A secret belongs in the host's environment, not in the workflow file: a literal is stored
/// with the run's definition like the rest of the file, while a [`EnvValue::FromHost`]
/// reference stores only the variable's name and is read when each invocation starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvValue {
    /// The value itself (`CURRENCY: EUR`).
    Literal(String),
    /// The value of the host's variable of this name (`API_KEY: { from-host: ORDERS_API_KEY }`).
    FromHost {
        /// The host's variable.
        #[serde(rename = "from-host")]
        from_host: String,
    },
}

impl EnvValue {
    /// The value the guest sees: the literal, or the host variable's value now. An unset
    /// host variable is an error naming it.
    pub fn resolve(&self, name: &str) -> Result<String, String> {
        match self {
            EnvValue::Literal(value) => Ok(value.clone()),
            EnvValue::FromHost { from_host } => std::env::var(from_host).map_err(|e| {
                format!(
                    "grants.env `{name}` takes the host's variable `{from_host}`, which is {}; \
                     set it in the environment weft runs in",
                    match e {
                        std::env::VarError::NotPresent => "not set",
                        std::env::VarError::NotUnicode(_) => "not UTF-8",
                    }
                )
            }),
        }
    }
}

impl From<&str> for EnvValue {
    fn from(value: &str) -> Self {
        EnvValue::Literal(value.to_owned())
    }
}

/// One preopened directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DirGrant {
    /// The directory on the host; the caller resolves it to an absolute path (S108).
    pub host: PathBuf,
    /// Where the guest sees it, e.g. `/data`.
    pub guest: String,
    /// Read-only (default) or read-write.
    #[serde(default)]
    pub mode: DirMode,
}

/// Access mode of a preopened directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirMode {
    /// Read only.
    #[default]
    Ro,
    /// Read and write.
    Rw,
}

impl Sandbox {
    /// Whether an invocation can change anything outside weft: with a directory granted
    /// read-write, or a host granted for HTTP. Reading granted environment variables and
    /// read-only directories changes nothing. An invocation that cannot may start before the
    /// transition that issued it is on disk (S100).
    pub fn reaches_out(&self) -> bool {
        !self.grants.http.is_empty() || self.grants.dirs.iter().any(|d| d.mode == DirMode::Rw)
    }

    /// Checks what can be checked before any invocation: granted directories exist and are
    /// absolute, guest paths and env names are well formed, HTTP grants are host names.
    ///
    /// Call it when a workflow file is loaded; an invocation with a sandbox that fails this check
    /// fails with code `sandbox-error`.
    pub fn check(&self) -> Result<(), PluginError> {
        let bad = |message: String| Err(PluginError::InvalidSandbox { message });
        if self.limits.memory_mib == Some(0) {
            return bad("limits.memory-mib must be at least 1".into());
        }
        if self.limits.max_output_mib == Some(0) {
            return bad("limits.max-output-mib must be at least 1".into());
        }
        if self.limits.timeout_ms == Some(0) {
            return bad("limits.timeout-ms must be at least 1".into());
        }
        for dir in &self.grants.dirs {
            if !dir.host.is_absolute() {
                return bad(format!(
                    "grants.dirs host `{}` is not absolute; resolve it against the workflow file's directory",
                    dir.host.display()
                ));
            }
            match std::fs::metadata(&dir.host) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return bad(format!(
                        "grants.dirs host `{}` is not a directory",
                        dir.host.display()
                    ));
                }
                Err(err) => {
                    return bad(format!(
                        "grants.dirs host `{}` cannot be opened: {err}; create it or fix the path",
                        dir.host.display()
                    ));
                }
            }
            if dir.guest.is_empty() || dir.guest.contains('\0') {
                return bad(format!(
                    "grants.dirs guest path `{}` for `{}` is empty or invalid; use e.g. `/data`",
                    dir.guest,
                    dir.host.display()
                ));
            }
        }
        let bad_name = |name: &str| name.is_empty() || name.contains('=') || name.contains('\0');
        for (name, value) in &self.grants.env {
            if bad_name(name) {
                return bad(format!(
                    "grants.env name `{name}` is invalid: it must be non-empty and contain no `=`"
                ));
            }
            if let EnvValue::FromHost { from_host } = value
                && bad_name(from_host)
            {
                return bad(format!(
                    "grants.env `{name}`: the host variable `{from_host}` is not a valid name: \
                     it must be non-empty and contain no `=`"
                ));
            }
        }
        for host in &self.grants.http {
            if HostPattern::parse(host).is_none() {
                return bad(format!(
                    "grants.http entry `{host}` is not a host name: write `api.example.com`, \
                     `api.example.com:8443` or `*.example.com`, without scheme or path"
                ));
            }
        }
        Ok(())
    }
}

/// One parsed `grants.http` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostPattern {
    /// Lower-case host; for a wildcard, the suffix after `*.`.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl HostPattern {
    /// Parses `host`, `host:port`, `*.suffix` or `[v6]:port`; `None` when malformed.
    pub(crate) fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim();
        if entry.is_empty() || entry.contains("://") || entry.contains('/') || entry.contains('@') {
            return None;
        }
        let (wildcard, rest) = match entry.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, entry),
        };
        let (host, port) = split_host_port(rest)?;
        if host.is_empty() || host.contains('*') || host.contains(char::is_whitespace) {
            return None;
        }
        Some(Self {
            host: host.to_ascii_lowercase(),
            wildcard,
            port,
        })
    }

    /// True when a request to `host` (and `port`) is allowed by this entry.
    pub(crate) fn allows(&self, host: &str, port: u16) -> bool {
        if let Some(p) = self.port
            && p != port
        {
            return false;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if self.wildcard {
            host.len() > self.host.len()
                && host.ends_with(&self.host)
                && host.as_bytes()[host.len() - self.host.len() - 1] == b'.'
        } else {
            host == self.host
        }
    }
}

/// Splits `host[:port]` (`[v6]:port` too); `None` when the port is not a number.
fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match s.rsplit_once(':') {
        // A bare IPv6 address without brackets: no port.
        Some((host, _)) if host.contains(':') => Some((s, None)),
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((s, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_parses_workflow_names_and_refuses_unknown_ones() {
        let json = serde_json::json!({
            "limits": {"memory-mib": 64, "timeout-ms": 5000, "fuel": null, "max-events": 10},
            "grants": {
                "dirs": [{"host": "/tmp", "guest": "/data", "mode": "rw"}],
                "env": {"CURRENCY": "EUR"},
                "http": ["api.example.com"]
            }
        });
        let sandbox: Sandbox = serde_json::from_value(json).expect("parses");
        assert_eq!(sandbox.limits.memory_mib(), 64);
        assert_eq!(sandbox.limits.fuel, None);
        assert_eq!(sandbox.limits.max_output_mib(), DEFAULT_MAX_OUTPUT_MIB);
        assert_eq!(sandbox.grants.dirs[0].mode, DirMode::Rw);
        assert!(sandbox.check().is_ok());

        let unknown = serde_json::json!({"limits": {"memory": 64}});
        assert!(serde_json::from_value::<Sandbox>(unknown).is_err());
        let default_mode =
            serde_json::json!({"grants": {"dirs": [{"host": "/tmp", "guest": "/d"}]}});
        let sandbox: Sandbox = serde_json::from_value(default_mode).expect("parses");
        assert_eq!(sandbox.grants.dirs[0].mode, DirMode::Ro);
    }

    #[test]
    fn check_names_the_bad_grant() {
        let mut sandbox = Sandbox::default();
        sandbox.grants.dirs.push(DirGrant {
            host: PathBuf::from("relative/dir"),
            guest: "/d".into(),
            mode: DirMode::Ro,
        });
        let err = sandbox
            .check()
            .expect_err("relative dir refused")
            .to_string();
        assert!(err.contains("relative/dir"), "{err}");

        let mut sandbox = Sandbox::default();
        sandbox
            .grants
            .http
            .push("https://api.example.com/v1".into());
        let err = sandbox.check().expect_err("url refused").to_string();
        assert!(err.contains("grants.http"), "{err}");
    }

    #[test]
    fn host_patterns_match_hosts_ports_and_wildcards() {
        let p = HostPattern::parse("API.example.com").expect("valid");
        assert!(p.allows("api.example.com", 443));
        assert!(p.allows("api.example.com", 8080));
        assert!(!p.allows("evil.com", 443));
        assert!(!p.allows("api.example.com.evil.com", 443));

        let p = HostPattern::parse("api.example.com:8443").expect("valid");
        assert!(p.allows("api.example.com", 8443));
        assert!(!p.allows("api.example.com", 443));

        let p = HostPattern::parse("*.example.com").expect("valid");
        assert!(p.allows("a.example.com", 443));
        assert!(p.allows("a.b.example.com", 443));
        assert!(!p.allows("example.com", 443));
        assert!(!p.allows("badexample.com", 443));

        let p = HostPattern::parse("[::1]:8080").expect("valid");
        assert!(p.allows("[::1]", 8080));
        assert!(
            HostPattern::parse("127.0.0.1")
                .expect("valid")
                .allows("127.0.0.1", 1234)
        );

        assert!(HostPattern::parse("").is_none());
        assert!(HostPattern::parse("http://x").is_none());
        assert!(HostPattern::parse("x/y").is_none());
        assert!(HostPattern::parse("x:notaport").is_none());
    }
}
