//! The span exporter: a task on the control runtime that takes the spans
//! workers queued ([`super::trace::Tracer`]), turns them into
//! OpenTelemetry span data and sends them to the collector over OTLP/gRPC
//! (`opentelemetry-otlp` on tonic; TLS for an `https://` endpoint), in
//! batches. Never on the request path:
//! a slow or absent collector fills the queue, and workers then drop spans
//! and count them.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use opentelemetry_sdk::Resource;
use sluicegate_config::TracingConfig;
use tonic::transport::{Certificate, ClientTlsConfig};

use super::trace::{SpanRecord, Tracer};

/// Most spans sent in one export call.
const BATCH_MAX: usize = 512;
/// How long a batch that is not full waits for more spans.
const LINGER: Duration = Duration::from_millis(100);

/// Runs the exporter until the process ends (or the tracer's receiver was
/// taken already). Export errors are counted and logged, at most one
/// warning until an export succeeds again.
pub async fn run(tracer: Arc<Tracer>, cfg: TracingConfig) {
    let Some(mut rx) = tracer.take_receiver() else {
        return;
    };
    let exporter = tls(&cfg.otlp).and_then(|tls| {
        let mut b = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(cfg.otlp.endpoint.clone())
            .with_timeout(cfg.otlp.timeout);
        if let Some(tls) = tls {
            b = b.with_tls_config(tls);
        }
        b.build().map_err(|e| e.to_string())
    });
    let mut exporter = match exporter {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, endpoint = %cfg.otlp.endpoint, "tracing: no OTLP exporter; spans are dropped");
            return;
        }
    };
    exporter.set_resource(
        &Resource::builder_empty()
            .with_service_name(cfg.service_name.clone())
            .build(),
    );
    let scope = InstrumentationScope::builder("sluicegate")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let mut batch = Vec::with_capacity(BATCH_MAX);
    let mut failing = false;
    loop {
        if rx.recv_many(&mut batch, BATCH_MAX).await == 0 {
            return;
        }
        if batch.len() < BATCH_MAX {
            // What came meanwhile joins the batch; an empty queue is not
            // waited for.
            tokio::time::sleep(LINGER).await;
            while batch.len() < BATCH_MAX {
                match rx.try_recv() {
                    Ok(span) => batch.push(span),
                    Err(_) => break,
                }
            }
        }
        let n = batch.len() as u64;
        let data = batch.drain(..).map(|r| span_data(r, &scope)).collect();
        match exporter.export(data).await {
            Ok(()) => {
                tracer.exported.fetch_add(n, Ordering::Relaxed);
                if failing {
                    tracing::info!(endpoint = %cfg.otlp.endpoint, "tracing: exports to the collector succeed again");
                    failing = false;
                }
            }
            Err(e) => {
                tracer.export_failed.fetch_add(n, Ordering::Relaxed);
                if !failing {
                    tracing::warn!(error = %e, endpoint = %cfg.otlp.endpoint, "tracing: export failed; its spans are lost");
                    failing = true;
                }
            }
        }
    }
}

/// The TLS settings of an `https://` endpoint: the system's roots, or
/// those of `ca_file`. `None`: plain gRPC.
fn tls(otlp: &sluicegate_config::OtlpConfig) -> Result<Option<ClientTlsConfig>, String> {
    let Some(rest) = otlp.endpoint.strip_prefix("https://") else {
        return Ok(None);
    };
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let tls = ClientTlsConfig::new().domain_name(host);
    Ok(Some(match &otlp.ca_file {
        Some(ca) => {
            let pem = std::fs::read(ca).map_err(|e| format!("ca_file {}: {e}", ca.display()))?;
            tls.ca_certificate(Certificate::from_pem(pem))
        }
        None => tls.with_native_roots(),
    }))
}

/// A queued span as OpenTelemetry span data: a server span named after
/// the method and route, with the gateway's and the upstream's times as
/// attributes.
fn span_data(r: SpanRecord, scope: &InstrumentationScope) -> SpanData {
    let s = r.span;
    let end = s.start + Duration::from_micros(r.total_us);
    let name = if r.route.is_empty() {
        Cow::Owned(s.method.to_string())
    } else {
        Cow::Owned(format!("{} {}", s.method, r.route))
    };
    let mut attributes = Vec::with_capacity(14);
    let mut put = |k: &'static str, v: opentelemetry::Value| attributes.push(KeyValue::new(k, v));
    put("http.request.method", s.method.to_string().into());
    put("url.path", s.path.to_string().into());
    put("http.response.status_code", i64::from(r.status).into());
    put(
        "network.protocol.version",
        if r.http2 { "2" } else { "1.1" }.into(),
    );
    put("url.scheme", if r.tls { "https" } else { "http" }.into());
    put("sluicegate.request_id", r.request_id.to_string().into());
    put("sluicegate.gateway_us", {
        let up = r.upstream_us.unwrap_or(0);
        (r.total_us.saturating_sub(up) as i64).into()
    });
    if !r.route.is_empty() {
        put("http.route", r.route.to_string().into());
    }
    if !r.service.is_empty() {
        put("sluicegate.service", r.service.to_string().into());
    }
    if !r.endpoint.is_empty() {
        put("server.address", r.endpoint.to_string().into());
    }
    if let Some(us) = r.upstream_us {
        put("sluicegate.upstream_us", (us as i64).into());
    }
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(s.trace_id),
            SpanId::from_bytes(s.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: s.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: s.parent.is_some(),
        span_kind: SpanKind::Server,
        name,
        start_time: s.start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: if r.status >= 500 {
            Status::error("")
        } else {
            Status::Unset
        },
        instrumentation_scope: scope.clone(),
    }
}
