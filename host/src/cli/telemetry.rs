//! The command line's logging and tracing: log lines on stderr (filtered by `WEFT_LOG`), and,
//! when a collector is named, OpenTelemetry traces of runs and step attempts exported over
//! OTLP/HTTP: a span per drive of a run (`weft.run`) and per step attempt (`weft.step`), with
//! the run id, path, attempt and outcome as attributes.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

/// What must be flushed before the process exits.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans not sent yet; call before the process exits.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: traces not all exported: {e}");
        }
    }
}

/// The traces endpoint of an OTLP/HTTP collector given by its base URL.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// Installs the global subscriber: logs on stderr, and spans to `otlp_endpoint` when given.
/// A collector that cannot be set up is reported and left out; weft runs on without it.
pub fn init(otlp_endpoint: Option<&str>) -> Telemetry {
    let log = fmt::layer()
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(
            EnvFilter::try_from_env("WEFT_LOG")
                // sled's own reports of a damaged database repeat what weft's refusal says.
                .unwrap_or_else(|_| EnvFilter::new("warn,sled=off")),
        );
    // The exporter's HTTP client takes TLS from the process's default provider (reqwest is
    // built without one of its own); set it once, ring, as the model client uses.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut problem = None;
    let provider = otlp_endpoint
        .filter(|e| !e.trim().is_empty())
        .and_then(|endpoint| {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(traces_url(endpoint))
                .build();
            match exporter {
                Ok(exporter) => Some(
                    SdkTracerProvider::builder()
                        .with_batch_exporter(exporter)
                        .with_resource(Resource::builder().with_service_name("weft").build())
                        .build(),
                ),
                Err(e) => {
                    problem = Some(format!(
                        "warning: no traces exported: the OTLP exporter for {endpoint} failed: {e}"
                    ));
                    None
                }
            }
        });
    let spans = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("weft"))
            .with_filter(Targets::new().with_target("weft", LevelFilter::INFO))
    });
    tracing_subscriber::registry().with(log).with(spans).init();
    if let Some(problem) = problem {
        eprintln!("{problem}");
    }
    Telemetry { provider }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }
}
