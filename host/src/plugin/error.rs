//! The errors the plugin host reports at its public boundary.

use std::path::PathBuf;

/// Why a plugin could not be loaded, or the host could not be set up.
///
/// Every message says what went wrong, where, and how to fix it. Failures of a single invocation
/// are not errors of this type: they are [`StepFailure`](crate::engine::invocation::StepFailure)s.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The WebAssembly engine could not be configured.
    #[error("cannot set up the WebAssembly engine: {message}; check the plugin host settings")]
    Engine {
        /// What wasmtime reported.
        message: String,
    },

    /// The plugin file could not be read.
    #[error("cannot read plugin file {}: {source}; check that the `wasm:` path is right", path.display())]
    Read {
        /// The file that was read.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// The pin is not a sha256 digest written as 64 hex digits.
    #[error(
        "invalid sha256 pin `{pin}` for {origin}: expected 64 hex digits (optionally prefixed with `sha256:`)"
    )]
    InvalidPin {
        /// The pin as given.
        pin: String,
        /// The plugin it was given for.
        origin: String,
    },

    /// The plugin's content does not match the pinned digest.
    #[error(
        "{origin} has sha256 {actual} but the workflow pins {expected}; \
         use the file the pin was made for, or update the `sha256:` pin"
    )]
    PinMismatch {
        /// The plugin that was checked.
        origin: String,
        /// The pinned digest.
        expected: String,
        /// The digest of the bytes given.
        actual: String,
    },

    /// The bytes fetched for a digest are not that component: the copy is damaged.
    #[error(
        "{origin}: the copy read has sha256 {actual}, not that digest: it is damaged; \
         restore the original component (a run's copy is the home's blobs/sha256/{expected})"
    )]
    Damaged {
        /// The plugin that was fetched.
        origin: String,
        /// Its digest.
        expected: String,
        /// The digest of the bytes read.
        actual: String,
    },

    /// The bytes are not a WebAssembly component wasmtime can compile.
    #[error(
        "cannot compile {origin}: {message}; a plugin must be a WebAssembly component \
         (for Rust: `cargo build --target wasm32-wasip2` of a wit-bindgen crate)"
    )]
    Compile {
        /// The plugin that was compiled.
        origin: String,
        /// What wasmtime reported.
        message: String,
    },

    /// The component uses the component-model-async ABI, which the host's engines do not
    /// enable.
    #[error(
        "cannot load {origin}: it uses the component-model-async ABI ({uses}), which weft does \
         not enable (wasmtime's `component-model-async` feature slows every call); build the \
         component with synchronous exports and imports: for jco's QuickJS backend pass \
         `--backend-qjs-disable-async`; Rust components built with wit-bindgen's default \
         bindings do not use it"
    )]
    AsyncAbi {
        /// The plugin that was compiled.
        origin: String,
        /// Its first use of the async ABI, e.g. `an async-lifted export`.
        uses: String,
    },

    /// The component imports something weft does not provide.
    #[error(
        "cannot link {origin}: {message}; weft provides WASI 0.2 (cli, clocks, filesystem, \
         random, io, sockets, http) and weft:plugin/{{writer,abort,run,log}}@0.1.0 only"
    )]
    Link {
        /// The plugin that was linked.
        origin: String,
        /// What wasmtime reported.
        message: String,
    },

    /// The component exports neither `steps` nor `tools`.
    #[error(
        "{origin} is not a weft plugin: it exports none of weft:plugin/steps@0.1.0, \
         weft:plugin/tools@0.1.0; it exports: {exports}"
    )]
    NotAPlugin {
        /// The plugin that was inspected.
        origin: String,
        /// What it exports instead, comma separated (or `nothing`).
        exports: String,
    },

    /// Calling `describe` at load failed (trap, timeout, wrong types).
    #[error("{origin} failed while describing itself: {message}")]
    Describe {
        /// The plugin that was described.
        origin: String,
        /// Why it failed.
        message: String,
    },

    /// `describe` returned something unusable (a schema that is not JSON, duplicate names).
    #[error("{origin} describes itself wrongly: {message}")]
    InvalidDescription {
        /// The plugin that was described.
        origin: String,
        /// What is wrong, and where.
        message: String,
    },

    /// A sandbox setting (`limits:` or `grants:`) cannot be honoured.
    #[error("invalid plugin sandbox: {message}")]
    InvalidSandbox {
        /// What is wrong and how to fix it.
        message: String,
    },

    /// An internal task failed (a panic in a blocking compile task).
    #[error("internal error in the plugin host: {message}")]
    Internal {
        /// What happened.
        message: String,
    },
}

/// The one-line text of an error chain: each cause once, joined by `: `, no backtraces.
pub(crate) fn one_line(err: &wasmtime::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let first = text.lines().next().unwrap_or("").trim().to_string();
        if first.is_empty() || parts.iter().any(|p| p.contains(&first)) {
            continue;
        }
        parts.push(first);
    }
    if parts.is_empty() {
        "unknown error".to_string()
    } else {
        parts.join(": ")
    }
}
