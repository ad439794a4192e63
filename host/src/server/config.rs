//! What `weft serve` allows and how much: where workflows come from, who may write, which hosts
//! and origins it answers, and the limits that keep one client from starving the others.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How a server guards itself. [`ServeConfig::default`] is safe on a loopback address: no
/// workflow file may be started, no token, only the server's own origin.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The only directory `POST /runs` starts workflows from (`--workflows DIR`): by a file
    /// path relative to it, or by the `id` of a workflow file in it. `None`: no workflow can be
    /// started over HTTP; runs are only read, resumed and cancelled.
    pub workflows: Option<PathBuf>,
    /// The bearer token every write (any method but `GET`, `HEAD`, `OPTIONS`) must carry.
    pub token: Option<String>,
    /// Host names, besides the bound address (and `localhost` on loopback), that requests may
    /// name in `Host` (`--allow-host`): what the server is reached by through DNS or a proxy.
    pub allowed_hosts: Vec<String>,
    /// Origins, besides the server's own, whose browser pages may call the API (`--cors-origin`,
    /// e.g. `https://ops.example.com`); they get CORS headers, every other origin a refusal.
    pub cors_origins: Vec<String>,
    /// Connections open at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers before its connection is closed.
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body, from the end of its headers: one
    /// slower is answered 408 (`body-timeout`) and its connection closed, so clients that
    /// trickle bodies cannot hold every connection slot.
    pub body_timeout: Duration,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Event streams that follow a run (`follow=true`) open at once; one more is refused (503).
    pub max_followers: usize,
    /// How long a followed event stream may stay silent before the server writes a heartbeat
    /// (an empty line), so proxies and clients see the stream is alive.
    pub heartbeat: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            workflows: None,
            token: None,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 1 << 20,
            max_followers: 256,
            heartbeat: Duration::from_secs(15),
        }
    }
}

impl ServeConfig {
    /// Sets [`ServeConfig::workflows`].
    pub fn with_workflows(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workflows = Some(dir.into());
        self
    }

    /// Sets [`ServeConfig::token`].
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Adds a host name to [`ServeConfig::allowed_hosts`].
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Adds an origin to [`ServeConfig::cors_origins`].
    pub fn cors_origin(mut self, origin: impl Into<String>) -> Self {
        self.cors_origins.push(origin.into());
        self
    }

    /// Sets [`ServeConfig::max_connections`].
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets [`ServeConfig::header_timeout`].
    pub fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// Sets [`ServeConfig::body_timeout`].
    pub fn with_body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Sets [`ServeConfig::max_body_bytes`].
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets [`ServeConfig::max_followers`].
    pub fn with_max_followers(mut self, n: usize) -> Self {
        self.max_followers = n;
        self
    }

    /// Sets [`ServeConfig::heartbeat`].
    pub fn with_heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }
}

/// A fresh token for a server that listens beyond loopback and was given none: 32 random
/// bytes, hex.
pub fn generate_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(hex::encode(bytes))
}

/// Whether a server bound to `addr` is reachable only from this machine.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}
