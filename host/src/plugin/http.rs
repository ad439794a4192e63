//! `wasi:http`, only to the hosts in `grants.http`.

use std::sync::Arc;

use wasmtime_wasi_http::WasiHttpHooks;

use super::events::Emitter;
use super::sandbox::HostPattern;
use crate::executor::LogLevel;

/// `wasi:http` hooks that refuse requests to hosts not in `grants.http`.
pub(crate) struct HttpGate {
    pub(crate) allowed: Arc<[HostPattern]>,
    pub(crate) out: Arc<Emitter>,
}

impl HttpGate {
    /// `None` when the request may go out; else the refused `host:port`.
    fn refused(&self, uri: &http::Uri) -> Option<String> {
        let Some(host) = uri.host() else {
            return Some("a request without host".to_string());
        };
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("http") => 80,
            _ => 443,
        });
        if self.allowed.iter().any(|p| p.allows(host, port)) {
            None
        } else {
            Some(format!("{host}:{port}"))
        }
    }
}

type SendResult = wasmtime_wasi_http::Result<(
    http::Response<wasmtime_wasi_http::WasiBody>,
    Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
)>;

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        if let Some(target) = self.refused(request.uri()) {
            self.out.notice(
                LogLevel::Warn,
                format!(
                    "HTTP request to {target} denied: the host is not listed in the plugin's \
                     grants.http"
                ),
            );
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        wasmtime_wasi_http::default_hooks().send_request(request, options, fut)
    }
}
