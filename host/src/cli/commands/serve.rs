//! `weft serve`: the HTTP API and the web view; recovers every run no process drives, and on a
//! shared store goes on taking up runs whose process ended, as `weft worker` does.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::service::{listen, print_recovery, shutdown_signal};
use crate::cli::{EXIT_FAILED, EXIT_OK, EXIT_USAGE, Output, StdOutput};
use crate::driver::{Recovery, Runtime};

/// The runs `weft serve` drives at once as a worker of a shared store before it takes up more.
const SERVE_CONCURRENCY: usize = 64;

/// The arguments of `weft serve`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft serve --workflows examples   (then open http://127.0.0.1:8080)\n  WEFT_TOKEN=s3cret weft serve --addr 0.0.0.0:8080 --token-env WEFT_TOKEN --allow-host weft.example.com"
)]
pub struct ServeArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// The only directory `POST /runs` starts workflows from (by `id` or by a file path
    /// relative to it); without it, runs are only read, resumed and cancelled over HTTP.
    #[arg(long, value_name = "DIR")]
    pub workflows: Option<PathBuf>,
    /// The environment variable holding the bearer token every write must carry. Without
    /// it, a server listening beyond loopback makes a token and prints it.
    #[arg(long, value_name = "NAME")]
    pub token_env: Option<String>,
    /// A host name the server is reached by (through DNS or a proxy), besides its address
    /// and, on loopback, `localhost`; requests naming another host are refused.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// An origin whose pages may call the API from a browser (CORS), e.g.
    /// `https://ops.example.com`; pages of other origins are refused.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Connections open at once; more are closed as they come.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Event streams following runs at once; more are refused (503).
    #[arg(long, default_value_t = 256)]
    pub max_followers: usize,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Seconds a client may take to send a request's headers.
    #[arg(long, default_value_t = 10)]
    pub header_timeout_s: u64,
    /// Seconds a client may take to send a request's body, once its headers are in; a slower
    /// one is answered 408 and disconnected.
    #[arg(long, default_value_t = 30)]
    pub body_timeout_s: u64,
    /// Delete ended runs once they ended this long ago (`30d`, `12h`), in the background; a
    /// workflow's own `retention:` applies to its runs instead. Without it, runs are kept
    /// until `weft prune`.
    #[arg(long, value_name = "DURATION", value_parser = crate::age::parse_age)]
    pub retention: Option<std::time::Duration>,
}

/// Carries out `weft serve`: serves until the server fails or Ctrl-C or SIGTERM stops it.
pub(crate) async fn exec(rt: &Runtime, args: ServeArgs, out: &mut dyn Output) -> i32 {
    let ServeArgs {
        addr,
        workflows,
        token_env,
        allow_hosts,
        cors_origins,
        max_connections,
        max_followers,
        max_body_bytes,
        header_timeout_s,
        body_timeout_s,
        retention,
    } = args;
    let (listener, bound) = match listen(&addr).await {
        Ok(l) => l,
        Err(message) => {
            out.err(&message);
            return EXIT_USAGE;
        }
    };
    let token = match token_env {
        Some(name) => match std::env::var(&name) {
            Ok(t) if !t.trim().is_empty() => Some(t.trim().to_owned()),
            _ => {
                out.err(&format!(
                    "error: --token-env {name}: the environment variable {name} is not set or empty; set it to the token writes must carry"
                ));
                return EXIT_USAGE;
            }
        },
        None if !crate::server::is_loopback(&bound) => match crate::server::generate_token() {
            Ok(t) => {
                out.err(&format!(
                        "writes (start, resume, cancel) need this token: `Authorization: Bearer {t}`; give your own with --token-env NAME"
                    ));
                Some(t)
            }
            Err(e) => {
                out.err(&format!("error: cannot make a token: {e}"));
                return EXIT_FAILED;
            }
        },
        None => None,
    };
    let mut config = crate::server::ServeConfig::default()
        .with_max_connections(max_connections)
        .with_max_followers(max_followers)
        .with_max_body_bytes(max_body_bytes)
        .with_header_timeout(std::time::Duration::from_secs(header_timeout_s.max(1)))
        .with_body_timeout(std::time::Duration::from_secs(body_timeout_s.max(1)));
    if let Some(retention) = retention {
        rt.set_retention(Some(retention));
    }
    config.workflows = workflows;
    config.token = token;
    config.allowed_hosts = allow_hosts;
    config.cors_origins = cors_origins;
    match rt.recover_all().await {
        Ok(report) => print_recovery(out, &report),
        Err(e) => out.err(&format!("error: cannot list the runs to recover: {e}")),
    }
    out.err(&format!(
        "serving http://{bound} (home {})",
        rt.home().display()
    ));
    // On a shared store, the server is also a worker: it takes up runs whose process
    // ended, as it recovered them at start (S129).
    let work = async {
        if rt.is_shared() {
            let report = |r: Recovery| print_recovery(&mut StdOutput, &r);
            let _ = rt
                .work(SERVE_CONCURRENCY, std::future::pending(), report)
                .await;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        r = crate::server::serve(rt.clone(), listener, config) => {
            if let Err(e) = r {
                out.err(&format!("error: {e}"));
                return EXIT_FAILED;
            }
        }
        () = work => {}
        () = shutdown_signal() => out.err("stopping"),
    }
    EXIT_OK
}
