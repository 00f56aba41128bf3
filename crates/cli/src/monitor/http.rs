//! The monitor's HTTP endpoint: `/metrics` and `/healthz`, served by `hyper` on one thread of
//! its own, off the measured CPUs, so that a scrape (or an attack) never runs where latency
//! is measured. `/metrics` is OpenMetrics text for clients that accept it (Prometheus), and
//! Prometheus's text format 0.0.4 for the rest.
//!
//! Limits: at most [`MAX_CONNECTIONS`] connections at once (more are answered 503 and closed
//! without being read), request heads of at most [`MAX_HEAD`] bytes (431 beyond), heads that
//! must arrive within [`HEAD_TIMEOUT`] (the connection is closed after), no connection longer
//! than [`CONNECTION_LIFETIME`], no request body (413), only GET and HEAD (405), only the two
//! paths (404).

use super::metrics::Exposition;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, Semaphore};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// The largest request head read (hyper's smallest buffer limit).
pub const MAX_HEAD: usize = 8192;
/// Time allowed for a request head to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a connection stays open.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// The content type of the OpenMetrics text format, served to clients that accept it
/// (Prometheus asks for it first).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of Prometheus's text format, served to every other client.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running server; [`Server::stop`] ends it and its thread.
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` now (so that a port in use is an error at once) and serves from a thread
    /// restricted to `cpus` (any CPU when empty).
    pub fn start(addr: SocketAddr, expo: Exposition, cpus: &[usize]) -> std::io::Result<Server> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let (tx, rx) = oneshot::channel();
        let cpus = cpus.to_vec();
        let expo = Arc::new(expo);
        let thread = std::thread::Builder::new()
            .name("sg-http".into())
            .spawn(move || {
                use sandglass_sys::signal;
                // Process-directed signals go to the main thread, which takes them in its
                // waits: this thread must never be the one they are delivered to.
                let _ = signal::block(&signal::WITH_JOB_CONTROL);
                if !cpus.is_empty() {
                    let _ =
                        sandglass_sys::sched::set_affinity(sandglass_sys::sched::gettid(), &cpus);
                }
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        eprintln!("sandglass: error: the HTTP server cannot start: {e}");
                        return;
                    }
                };
                rt.block_on(serve(listener, expo, rx));
            })?;
        Ok(Server {
            addr: local,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, drops every connection and joins the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn serve(
    listener: std::net::TcpListener,
    expo: Arc<Exposition>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sandglass: error: the HTTP server cannot listen: {e}");
            return;
        }
    };
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // The connections under way, aborted together when the server stops.
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((s, _)) => s,
                    Err(_) => {
                        // Out of descriptors or a connection reset before it was accepted:
                        // wait a little rather than spin.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    // Too many connections: say so, without reading or waiting.
                    let _ = stream.try_write(
                        b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
                    );
                    continue;
                };
                let expo = expo.clone();
                // Reap the connections that ended, so the set stays as small as the live ones.
                while tasks.try_join_next().is_some() {}
                tasks.spawn(async move {
                    let _permit = permit;
                    let conn = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEAD_TIMEOUT)
                        .max_buf_size(MAX_HEAD)
                        .serve_connection(
                            TokioIo::new(stream),
                            service_fn(move |req| {
                                let expo = expo.clone();
                                async move { Ok::<_, std::convert::Infallible>(answer(&req, &expo)) }
                            }),
                        );
                    let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
                });
            }
        }
    }
    tasks.abort_all();
}

fn response(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The answer to one request.
fn answer(req: &Request<Incoming>, expo: &Arc<Exposition>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = response(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are served\n",
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let has_body = req.headers().contains_key(TRANSFER_ENCODING)
        || req
            .headers()
            .get(CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if has_body {
        return response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "requests carry no body here\n",
        );
    }
    match req.uri().path() {
        "/metrics" => match expo.encode() {
            Ok(text) => {
                let openmetrics = req.headers().get_all(ACCEPT).iter().any(|v| {
                    v.to_str()
                        .is_ok_and(|v| v.contains("application/openmetrics-text"))
                });
                let (text, kind) = if openmetrics {
                    (text, OPENMETRICS)
                } else {
                    (super::metrics::prometheus_text(&text), PROMETHEUS_TEXT)
                };
                let mut r = Response::new(Full::new(Bytes::from(text)));
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
                r
            }
            Err(_) => response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the metrics could not be encoded\n",
            ),
        },
        "/healthz" => response(StatusCode::OK, "ok\n"),
        _ => response(
            StatusCode::NOT_FOUND,
            "not found: sandglass serves /metrics and /healthz\n",
        ),
    }
}
