//! The admin HTTP listener: `GET /metrics` (Prometheus text format) and
//! `GET /healthz`. One request per connection; small, bounded reads.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_proxy::Shared;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAX_HEAD: usize = 8192;
const READ_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(READ_TIMEOUT, handle(stream, &shared)).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn handle(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    let (method, path) = loop {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                break (
                    req.method.unwrap_or("").to_string(),
                    req.path.unwrap_or("").to_string(),
                )
            }
            Ok(httparse::Status::Partial) if len < MAX_HEAD => continue,
            _ => {
                return respond(
                    &mut stream,
                    400,
                    "application/json",
                    b"{\"error\":\"bad request\",\"status\":400}\n",
                    false,
                )
                .await
            }
        }
    };
    let head = method == "HEAD";
    if method != "GET" && !head {
        return respond(
            &mut stream,
            405,
            "application/json",
            b"{\"error\":\"method not allowed\",\"status\":405}\n",
            head,
        )
        .await;
    }
    let path = path.split('?').next().unwrap_or("");
    match path {
        "/metrics" => {
            let body = shared.render_metrics();
            respond(
                &mut stream,
                200,
                "text/plain; version=0.0.4",
                body.as_bytes(),
                head,
            )
            .await
        }
        "/healthz" => {
            let generation = shared.snapshot.load().generation;
            let body = format!("{{\"status\":\"ok\",\"config_generation\":{generation}}}\n");
            respond(&mut stream, 200, "application/json", body.as_bytes(), head).await
        }
        _ => {
            respond(
                &mut stream,
                404,
                "application/json",
                b"{\"error\":\"not found\",\"status\":404}\n",
                head,
            )
            .await
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let reason = sluicegate_proxy::reason(status);
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    stream.write_all(&out).await?;
    stream.shutdown().await
}
