//! The HTTP endpoint of `sandglass monitor`: `/metrics` and `/healthz`, served by `hyper` on
//! one thread of its own, off the measured CPUs, so that a scrape (or an attack) never runs
//! where latency is measured. `/metrics` is OpenMetrics text for clients that accept it
//! (Prometheus), and Prometheus's text format 0.0.4 for the rest.
//!
//! The endpoint must keep answering Prometheus while any local process misbehaves, so its
//! limits bound what a connection costs, not how many clients get through ([`Limits`]):
//!
//! - every request head must be complete within [`Limits::head_timeout`] of the moment the
//!   server starts waiting for it (the accept, or the end of the previous answer on a
//!   keep-alive connection), however steadily its bytes trickle in; the connection is then
//!   closed without an answer. An idle keep-alive connection is closed the same way.
//! - a head is at most [`Limits::max_head`] bytes (431 and closed beyond), a connection serves
//!   at most [`Limits::max_requests`] requests (the last answer says `connection: close`) and
//!   lives at most [`Limits::lifetime`];
//! - at most [`Limits::max_connections`] connections are held. A new connection is never
//!   refused for want of room: the connection that has waited longest for its next request
//!   head (idle, or slow to send it) is closed to make room. An honest scraper sends its
//!   request as soon as it connects, so it is the newest, never the one closed.
//!
//! A connection holds a read buffer of at most [`Limits::max_head`] bytes and the answer
//! under way, so the whole endpoint holds at most `max_connections` of those. Malformed
//! requests get 400 and a closed connection (hyper's parser, `httparse`); a body 413, another
//! method 405, another path 404.
//!
//! [`respond`] runs one connection over memory, for the fuzz target of `crates/fuzzing` and
//! the tests.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    HeaderValue, ACCEPT, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

/// What the endpoint allows a connection; [`Limits::DEFAULT`] is what `sandglass monitor`
/// serves with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections held at once; beyond, the one that has waited longest for a request head
    /// is closed.
    pub max_connections: usize,
    /// The largest request head read, in bytes (at least 8192, hyper's smallest buffer).
    pub max_head: usize,
    /// Time allowed for a whole request head, from the moment the server waits for it.
    pub head_timeout: Duration,
    /// Requests served on one connection.
    pub max_requests: u64,
    /// The longest a connection stays open.
    pub lifetime: Duration,
}

impl Limits {
    /// The limits of `sandglass monitor --listen` (docs/monitor.md).
    pub const DEFAULT: Limits = Limits {
        max_connections: 256,
        max_head: 8192,
        head_timeout: Duration::from_secs(5),
        max_requests: 100,
        lifetime: Duration::from_secs(30),
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// The format a scraper asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics text 1.0.0, ending with `# EOF` (Prometheus asks for it first).
    OpenMetrics,
    /// Prometheus's text format 0.0.4 (curl, promtool, older scrapers).
    PrometheusText,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// What `/metrics` serves: the metrics encoded at each scrape.
pub trait Exposition: Send + Sync + 'static {
    /// The whole exposition in `format`, or `None` when it cannot be encoded (answered 500).
    fn encode(&self, format: Format) -> Option<String>;
}

/// A running server; [`Server::stop`] ends it and its thread.
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` now (so that a port in use is an error at once) and serves from a thread
    /// restricted to `cpus` (any CPU when empty).
    pub fn start(
        addr: SocketAddr,
        expo: Arc<dyn Exposition>,
        cpus: &[usize],
        limits: Limits,
    ) -> std::io::Result<Server> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let listener = {
            let _in_runtime = rt.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let (tx, rx) = oneshot::channel();
        let cpus = cpus.to_vec();
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
                rt.block_on(serve(listener, expo, limits, rx));
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

/// A connection the server holds: when it started waiting for its current request head
/// (milliseconds since the server started), and the handle that closes it.
struct Held {
    waiting_since: Arc<AtomicU64>,
    /// Its place in the order of accepts: of two that began waiting in the same millisecond,
    /// the one accepted first has waited longer.
    seq: u64,
    abort: tokio::task::AbortHandle,
}

async fn serve(
    listener: tokio::net::TcpListener,
    expo: Arc<dyn Exposition>,
    limits: Limits,
    mut stop: oneshot::Receiver<()>,
) {
    let epoch = Instant::now();
    // The connections under way, aborted together when the server stops.
    let mut tasks = tokio::task::JoinSet::new();
    let mut held: HashMap<tokio::task::Id, Held> = HashMap::new();
    let mut accepts = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            Some(ended) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let id = match ended {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                held.remove(&id);
            }
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
                if held.len() >= limits.max_connections.max(1) {
                    // Room for the new one: close the connection that has waited longest
                    // for a request head. An answer under way resets its wait, so an
                    // honest scrape is never the one closed while idle ones are held.
                    let oldest = held
                        .iter()
                        .min_by_key(|(_, h)| (h.waiting_since.load(Ordering::Relaxed), h.seq))
                        .map(|(id, _)| *id);
                    if let Some(h) = oldest.and_then(|id| held.remove(&id)) {
                        h.abort.abort();
                    }
                }
                let waiting_since = Arc::new(AtomicU64::new(millis_since(epoch)));
                let abort = tasks.spawn(connection(
                    TokioIo::new(stream),
                    expo.clone(),
                    limits,
                    waiting_since.clone(),
                    epoch,
                ));
                accepts += 1;
                held.insert(
                    abort.id(),
                    Held {
                        waiting_since,
                        seq: accepts,
                        abort,
                    },
                );
            }
        }
    }
    tasks.abort_all();
}

fn millis_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The connection settings of every connection, those of the server and of [`respond`].
fn builder(limits: &Limits) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(limits.max_head.max(8192))
        .keep_alive(limits.max_requests > 1)
        // A client that shuts its side after the request still gets the answer.
        .half_close(true);
    b
}

/// Serves one connection until it closes, a limit ends it or the task is aborted.
async fn connection<I>(
    io: TokioIo<I>,
    expo: Arc<dyn Exposition>,
    limits: Limits,
    waiting_since: Arc<AtomicU64>,
    epoch: Instant,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let served = AtomicU64::new(0);
    let conn = builder(&limits).serve_connection(
        io,
        service_fn(move |req| {
            waiting_since.store(millis_since(epoch), Ordering::Relaxed);
            let n = served.fetch_add(1, Ordering::Relaxed) + 1;
            let mut r = answer(&req, expo.as_ref());
            if n >= limits.max_requests {
                r.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            async move { Ok::<_, std::convert::Infallible>(r) }
        }),
    );
    let _ = tokio::time::timeout(limits.lifetime, conn).await;
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
fn answer(req: &Request<Incoming>, expo: &dyn Exposition) -> Response<Full<Bytes>> {
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
        // The body is never read: the connection closes after the answer.
        let mut r = response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "requests carry no body here\n",
        );
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => {
            let openmetrics = req.headers().get_all(ACCEPT).iter().any(|v| {
                v.to_str()
                    .is_ok_and(|v| v.contains("application/openmetrics-text"))
            });
            let format = if openmetrics {
                Format::OpenMetrics
            } else {
                Format::PrometheusText
            };
            match expo.encode(format) {
                Some(text) => {
                    let mut r = Response::new(Full::new(Bytes::from(text)));
                    r.headers_mut().insert(
                        CONTENT_TYPE,
                        HeaderValue::from_static(format.content_type()),
                    );
                    r
                }
                None => response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the metrics could not be encoded\n",
                ),
            }
        }
        "/healthz" => response(StatusCode::OK, "ok\n"),
        _ => response(
            StatusCode::NOT_FOUND,
            "not found: sandglass serves /metrics and /healthz\n",
        ),
    }
}

/// Serves one connection over memory, with `limits`, whose client sends `request` and then
/// shuts its side: returns every byte the server wrote before it closed the connection, or
/// `None` when it had not closed it within `limits.lifetime` (a hang).
pub fn respond(request: &[u8], expo: Arc<dyn Exposition>, limits: Limits) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .ok()?;
    rt.block_on(async move {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let epoch = Instant::now();
        let served = tokio::spawn(connection(
            TokioIo::new(server),
            expo,
            limits,
            Arc::new(AtomicU64::new(0)),
            epoch,
        ));
        let talk = async {
            let mut out = Vec::new();
            let (mut rx, mut tx) = tokio::io::split(&mut client);
            let send = async {
                // The server may close before reading it all (431, 413, 400).
                let _ = tx.write_all(request).await;
                let _ = tx.shutdown().await;
            };
            let receive = async {
                let _ = rx.read_to_end(&mut out).await;
            };
            tokio::join!(send, receive);
            out
        };
        let out = tokio::time::timeout(limits.lifetime + Duration::from_secs(1), talk).await;
        served.abort();
        out.ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    struct Fixed;

    impl Exposition for Fixed {
        fn encode(&self, format: Format) -> Option<String> {
            Some(match format {
                Format::OpenMetrics => "# TYPE up gauge\nup 1\n# EOF\n".into(),
                Format::PrometheusText => "# TYPE up gauge\nup 1\n".into(),
            })
        }
    }

    fn status(answer: &[u8]) -> u16 {
        String::from_utf8_lossy(answer)
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    fn statuses(answer: &[u8]) -> Vec<u16> {
        let text = String::from_utf8_lossy(answer);
        text.match_indices("HTTP/1.1 ")
            .filter_map(|(i, m)| text[i + m.len()..].get(..3)?.parse().ok())
            .collect()
    }

    fn over_memory(request: &[u8]) -> Vec<u8> {
        respond(request, Arc::new(Fixed), Limits::DEFAULT).unwrap()
    }

    #[test]
    fn requests_over_memory_get_their_answers() {
        let ok = over_memory(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n");
        assert_eq!(status(&ok), 200);
        assert!(ok.ends_with(b"ok\n"));
        let m =
            over_memory(b"GET /metrics HTTP/1.1\r\naccept: application/openmetrics-text\r\n\r\n");
        let text = String::from_utf8_lossy(&m);
        assert!(text.contains("application/openmetrics-text"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(status(&over_memory(b"GARBAGE\r\n\r\n")), 400);
        assert_eq!(status(&over_memory(b"GET /x HTTP/1.1\r\n\r\n")), 404);
        assert_eq!(status(&over_memory(b"PUT /metrics HTTP/1.1\r\n\r\n")), 405);
        assert_eq!(
            status(&over_memory(
                b"GET /metrics HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello"
            )),
            413
        );
        let huge = format!("GET /metrics HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(9000));
        assert_eq!(status(&over_memory(huge.as_bytes())), 431);
        // HEAD: the headers of the answer and no body.
        let head = over_memory(b"HEAD /healthz HTTP/1.1\r\n\r\n");
        assert_eq!(status(&head), 200);
        assert!(head.ends_with(b"\r\n\r\n"), "{head:?}");
        // An incomplete head at the end of the input: closed, without an answer.
        assert!(over_memory(b"GET /metr").is_empty());
    }

    #[test]
    fn a_keep_alive_connection_serves_at_most_max_requests() {
        let many = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n".repeat(150);
        let out = over_memory(&many);
        let s = statuses(&out);
        assert_eq!(s.len() as u64, Limits::DEFAULT.max_requests, "{}", s.len());
        assert!(s.iter().all(|&c| c == 200));
        let text = String::from_utf8_lossy(&out);
        assert_eq!(text.matches("connection: close").count(), 1, "{text}");
    }

    fn short() -> Limits {
        Limits {
            max_connections: 8,
            head_timeout: Duration::from_millis(600),
            ..Limits::DEFAULT
        }
    }

    fn start(limits: Limits) -> Server {
        Server::start("127.0.0.1:0".parse().unwrap(), Arc::new(Fixed), &[], limits).unwrap()
    }

    /// How long a test waits for an answer or a close before it calls the server hung: a hang
    /// guard far above any deadline of the server under test, so that a busy machine's slow
    /// answer is not a failure.
    const GUARD: Duration = Duration::from_secs(120);

    fn scrape(addr: SocketAddr) -> Vec<u8> {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(GUARD)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    }

    /// Reads until the server closes; how long that took from `since`. Panics when it has
    /// not closed within [`GUARD`].
    fn closed_after(s: &mut TcpStream, since: Instant) -> Duration {
        s.set_read_timeout(Some(GUARD)).unwrap();
        let mut buf = [0u8; 256];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return since.elapsed(),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    panic!(
                        "hang guard: the server did not close the connection within {} s (the machine may be overloaded, or it hung)",
                        GUARD.as_secs()
                    )
                }
                Err(_) => return since.elapsed(),
                Ok(_) => {}
            }
        }
    }

    #[test]
    fn a_slow_head_is_cut_off_at_its_deadline_however_steadily_it_trickles() {
        let server = start(short());
        let mut s = TcpStream::connect(server.addr()).unwrap();
        let t0 = Instant::now();
        // A byte every 100 ms: progress, but never a whole head (the header's value goes on
        // until the server cuts it, or the hang guard).
        let head = b"GET /metrics HTTP/1.1\r\nx-slow: ";
        let mut cut = false;
        for b in head.iter().chain(std::iter::repeat(&b'a')) {
            if s.write_all(std::slice::from_ref(b)).is_err() {
                cut = true;
                break;
            }
            if t0.elapsed() > GUARD {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            cut,
            "hang guard: the server was still reading after {:?} (its deadline is 600 ms; the machine may be overloaded, or it hung)",
            t0.elapsed()
        );
        let took = closed_after(&mut s, t0);
        assert!(took >= Duration::from_millis(600), "{took:?}");
        // An idle connection: closed at the same deadline, without an answer.
        let mut idle = TcpStream::connect(server.addr()).unwrap();
        let t1 = Instant::now();
        let mut buf = Vec::new();
        idle.set_read_timeout(Some(GUARD)).unwrap();
        let read = idle.read_to_end(&mut buf);
        assert!(
            read.is_ok(),
            "hang guard: not closed within {} s: {read:?}",
            GUARD.as_secs()
        );
        assert!(buf.is_empty(), "{buf:?}");
        assert!(t1.elapsed() >= Duration::from_millis(600));
        assert_eq!(status(&scrape(server.addr())), 200);
        server.stop();
    }

    #[test]
    fn an_over_long_head_gets_431_and_a_closed_connection() {
        let server = start(short());
        let mut s = TcpStream::connect(server.addr()).unwrap();
        let pad = "a".repeat(Limits::DEFAULT.max_head + 1);
        let _ = s.write_all(format!("GET /metrics HTTP/1.1\r\nx: {pad}\r\n\r\n").as_bytes());
        s.set_read_timeout(Some(GUARD)).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert_eq!(status(&out), 431, "{}", String::from_utf8_lossy(&out));
        server.stop();
    }

    #[test]
    fn beyond_max_connections_the_longest_waiting_is_closed_and_scrapes_are_answered() {
        // A head deadline far beyond the hang guard: a close before the guard is the
        // eviction, however slowly a busy machine runs the server.
        let limits = Limits {
            head_timeout: GUARD * 5,
            ..short()
        };
        let server = start(limits);
        let mut idle: Vec<TcpStream> = (0..limits.max_connections)
            .map(|_| {
                let s = TcpStream::connect(server.addr()).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                s
            })
            .collect();
        // Every slot is held: a scrape still gets its answer, in place of the oldest.
        assert_eq!(status(&scrape(server.addr())), 200);
        closed_after(&mut idle[0], Instant::now());
        // The newest idle connection is still held.
        let last = idle.last_mut().unwrap();
        last.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 16];
        let still =
            matches!(last.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        assert!(still, "the newest connection was closed");
        for _ in 0..20 {
            assert_eq!(status(&scrape(server.addr())), 200);
        }
        server.stop();
    }
}
