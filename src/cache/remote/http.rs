//! The wire: plain GET / HEAD / PUT against one base URL, with an optional bearer token.
//! Every failure is a `Failure` the caller classifies; nothing here decides whether a
//! job fails. Every request runs on a thread of its own while its caller waits in steps
//! of `POLL`: a cancel (SIGINT/SIGTERM) ends the wait at once, whatever the server does
//! (a stalled server is otherwise waited for up to `cache.remote.timeout` per read).

use std::fmt;
use std::io::Read;
use std::sync::mpsc;
use std::time::Duration;

/// How often a caller waiting on the network looks for a cancel.
const POLL: Duration = Duration::from_millis(50);
/// A body is handed over in pieces of about this size (less at its end or on a pause).
const PIECE: usize = 256 << 10;

/// Why a remote operation did not give what was asked. Rendered in one place (`Display`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Connection refused or lost, name resolution, TLS.
    Connect { url: String, why: String },
    /// No progress within `cache.remote.timeout`.
    Timeout { url: String },
    /// An HTTP status that is neither success nor 404.
    Status { url: String, code: u16 },
    /// A blob whose bytes do not hash to its name, or not of the recorded size.
    Tampered { url: String, why: String },
    /// A record that does not parse or does not describe what it is stored under.
    BadRecord { key: String, why: String },
    /// `signing.verify_key` is set for remote records and the record carries no signature.
    Unsigned { key: String },
    /// `signing.verify_key` is set for remote records and the signature does not verify.
    BadSignature { key: String },
    /// A record names a blob the server no longer has.
    BlobMissing { url: String },
    /// A record claims more bytes than the local cache's filesystem has free.
    TooBig { key: String, bytes: u64, free: u64 },
    /// A downloaded file could not be laid out in the local staging dir.
    Unstorable { path: String, why: String },
    /// The run was cancelled while this request was under way; it was abandoned.
    Cancelled { url: String },
}

impl Failure {
    /// What `--remote-required` turns into exit 3: the server cannot be used at all.
    pub fn is_infra(&self) -> bool {
        match self {
            Failure::Connect { .. } | Failure::Timeout { .. } => true,
            Failure::Status { code, .. } => *code >= 500 || *code == 401 || *code == 403,
            _ => false,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Connect { url, why } => write!(f, "cannot reach {url}: {why}"),
            Failure::Timeout { url } => write!(f, "{url} timed out"),
            Failure::Status { url, code } => {
                let hint = match code {
                    401 | 403 => " (check the token in cache.remote.token_env)",
                    _ => "",
                };
                write!(f, "{url} answered HTTP {code}{hint}")
            }
            Failure::Tampered { url, why } => {
                write!(f, "{url} is not what its record says ({why}); not used")
            }
            Failure::BadRecord { key, why } => write!(f, "record {key} is unusable: {why}"),
            Failure::Unsigned { key } => write!(
                f,
                "record {key} is not signed and signing.verify_key is set; ignored"
            ),
            Failure::BadSignature { key } => write!(
                f,
                "record {key} has a signature that does not verify with signing.verify_key; ignored"
            ),
            Failure::BlobMissing { url } => write!(f, "{url} is gone from the server"),
            Failure::TooBig { key, bytes, free } => write!(
                f,
                "record {key} claims {bytes} bytes, more than the {free} free beside the cache; not downloaded"
            ),
            Failure::Unstorable { path, why } => {
                write!(f, "cannot store {path} from the remote: {why}; not used")
            }
            Failure::Cancelled { url } => write!(f, "{url}: cancelled"),
        }
    }
}

pub struct Client {
    agent: ureq::Agent,
    base: String,
    auth: Option<String>,
}

impl Client {
    /// `timeout` bounds connecting, each response's headers, and every single read or
    /// write of a body (so a large blob may take longer in total while it progresses).
    pub fn new(base: &str, timeout: Duration, token: Option<&str>) -> Client {
        let t = Some(timeout);
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_resolve(t)
            .timeout_connect(t)
            .timeout_send_request(t)
            .timeout_recv_response(t)
            .timeout_per_read(t)
            .timeout_per_write(t)
            .max_idle_connections_per_host(16)
            .user_agent(concat!("scenerun/", env!("CARGO_PKG_VERSION")))
            .build();
        let (base, basic) = split_userinfo(base.trim_end_matches('/'));
        Client {
            agent: config.into(),
            base,
            auth: token.map(|t| format!("Bearer {t}")).or(basic),
        }
    }

    /// The URL without credentials, for messages and requests.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base)
    }

    /// true: present (2xx); false: 404.
    pub fn head(&self, path: &str) -> Result<bool, Failure> {
        let url = self.url(path);
        let mut req = self.agent.head(&url);
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let u = url.clone();
        let code = abortable(&url, move || {
            req.call()
                .map(|r| r.status().as_u16())
                .map_err(|e| classify(&u, e))
        })?;
        match code {
            200..=299 => Ok(true),
            404 => Ok(false),
            code => Err(Failure::Status { url, code }),
        }
    }

    /// The body as a reader, or None for a 404. Reading it may fail with an io error:
    /// map it with `io_failure` (the caller tells a cancel by `proc::interrupted`).
    pub fn get(&self, path: &str) -> Result<Option<impl Read + use<>>, Failure> {
        let url = self.url(path);
        let mut req = self.agent.get(&url);
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        // The request and then its body on a thread of their own: the status first, then
        // the body in pieces, as fast as the reader takes them (a few pieces ahead).
        let (status_tx, status_rx) = mpsc::channel();
        let (body_tx, body_rx) = mpsc::sync_channel::<std::io::Result<Vec<u8>>>(4);
        let u = url.clone();
        std::thread::spawn(move || {
            let resp = match req.call() {
                Ok(r) => r,
                Err(e) => {
                    let _ = status_tx.send(Err(classify(&u, e)));
                    return;
                }
            };
            let code = resp.status().as_u16();
            if status_tx.send(Ok(code)).is_err() || !(200..=299).contains(&code) {
                return;
            }
            let mut body = resp.into_body().into_reader();
            loop {
                let piece = read_piece(&mut body);
                let end = !matches!(&piece, Ok(p) if !p.is_empty());
                // The reader is gone (dropped, or cancelled): stop reading.
                if body_tx.send(piece).is_err() || end {
                    return;
                }
            }
        });
        let code = wait(&url, &status_rx)??;
        match code {
            200..=299 => Ok(Some(Body {
                rx: body_rx,
                piece: Vec::new(),
                at: 0,
                done: false,
            })),
            404 => Ok(None),
            code => Err(Failure::Status { url, code }),
        }
    }

    /// A small body (a record), at most `limit` bytes; None for a 404.
    pub fn get_small(&self, path: &str, limit: u64) -> Result<Option<Vec<u8>>, Failure> {
        let url = self.url(path);
        let Some(body) = self.get(path)? else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        body.take(limit + 1)
            .read_to_end(&mut buf)
            .map_err(|e| io_failure(&url, &e))?;
        if buf.len() as u64 > limit {
            return Err(Failure::BadRecord {
                key: path.into(),
                why: format!("larger than {limit} bytes"),
            });
        }
        Ok(Some(buf))
    }

    /// Upload; any 2xx is success.
    pub fn put(
        &self,
        path: &str,
        body: impl ureq::AsSendBody + Send + 'static,
    ) -> Result<(), Failure> {
        let url = self.url(path);
        let mut req = self.agent.put(&url);
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let u = url.clone();
        let code = abortable(&url, move || {
            req.send(body)
                .map(|r| r.status().as_u16())
                .map_err(|e| classify(&u, e))
        })?;
        match code {
            200..=299 => Ok(()),
            code => Err(Failure::Status { url, code }),
        }
    }
}

/// What a ureq error means for this request.
fn classify(url: &str, e: ureq::Error) -> Failure {
    match e {
        ureq::Error::Timeout(_) => Failure::Timeout { url: url.into() },
        ureq::Error::Io(io) => io_failure(url, &io),
        ureq::Error::StatusCode(code) => Failure::Status {
            url: url.into(),
            code,
        },
        other => Failure::Connect {
            url: url.into(),
            why: other.to_string(),
        },
    }
}

/// Run a request on a thread of its own and wait for its answer, looking for a cancel
/// every `POLL`: cancelled, the request is abandoned (its thread ends with its timeout or
/// with the process) and the answer is `Failure::Cancelled`.
fn abortable<T: Send + 'static>(
    url: &str,
    f: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    wait(url, &rx)?
}

/// The next message on `rx`, or `Cancelled` as soon as the run is interrupted.
fn wait<T>(url: &str, rx: &mpsc::Receiver<T>) -> Result<T, Failure> {
    let cancelled = || Failure::Cancelled { url: url.into() };
    loop {
        match rx.recv_timeout(POLL) {
            Ok(v) => return Ok(v),
            Err(mpsc::RecvTimeoutError::Timeout) if !crate::base::proc::interrupted() => {}
            Err(_) => return Err(cancelled()),
        }
    }
}

/// Up to `PIECE` bytes of a body: what the reads give until that much has come or the
/// body ends (empty: the end).
fn read_piece(body: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut piece = vec![0u8; PIECE];
    let mut len = 0;
    while len < PIECE / 2 {
        match body.read(&mut piece[len..]) {
            Ok(0) => break,
            Ok(k) => len += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    piece.truncate(len);
    Ok(piece)
}

/// A response body read on the request's thread and handed over in pieces; a cancel
/// ends a read at once with a `Cancel` error.
struct Body {
    rx: mpsc::Receiver<std::io::Result<Vec<u8>>>,
    piece: Vec<u8>,
    at: usize,
    done: bool,
}

/// The io error of a body read that a cancel ended.
#[derive(Debug)]
struct Cancel;

impl fmt::Display for Cancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cancelled")
    }
}

impl std::error::Error for Cancel {}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.piece.len() {
            if self.done {
                return Ok(0);
            }
            match wait("", &self.rx) {
                Ok(Ok(p)) if p.is_empty() => self.done = true,
                Ok(Ok(p)) => (self.piece, self.at) = (p, 0),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(std::io::Error::other(Cancel)),
            }
        }
        let n = buf.len().min(self.piece.len() - self.at);
        buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// `http://user:pass@host/...` → the URL without `user:pass@` and a Basic authorization
/// (bazel-remote's htpasswd users); the credentials never appear in a message.
pub fn split_userinfo(url: &str) -> (String, Option<String>) {
    use base64::Engine;
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), None);
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let auth = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(userinfo)
            );
            (
                format!("{scheme}://{host}{}", &rest[host_end..]),
                Some(auth),
            )
        }
        None => (url.to_string(), None),
    }
}

/// An io error while a body streams: a timeout, or the connection was lost. The HTTP
/// client hands its own errors (its timeouts among them) through the io error it wraps.
pub fn io_failure(url: &str, e: &std::io::Error) -> Failure {
    let client_timeout = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<ureq::Error>())
        .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
    if e.kind() == std::io::ErrorKind::TimedOut || client_timeout {
        Failure::Timeout { url: url.into() }
    } else {
        Failure::Connect {
            url: url.into(),
            why: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_url() {
        let (u, a) = split_userinfo("http://ci:s3cret@cache:9090/scenerun");
        assert_eq!(u, "http://cache:9090/scenerun");
        assert_eq!(a.as_deref(), Some("Basic Y2k6czNjcmV0"));
        let (u, a) = split_userinfo("https://cache/a@b");
        assert_eq!(u, "https://cache/a@b");
        assert!(a.is_none());
    }

    #[test]
    fn a_client_timeout_inside_an_io_error_is_a_timeout() {
        let wrapped = ureq::Error::Timeout(ureq::Timeout::RecvBody).into_io();
        assert!(matches!(io_failure("u", &wrapped), Failure::Timeout { .. }));
        let plain = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow");
        assert!(matches!(io_failure("u", &plain), Failure::Timeout { .. }));
        // Text alone decides nothing: a lost connection that mentions a timeout is one.
        let lost = std::io::Error::other("connection reset (timeout setting 5s)");
        assert!(matches!(io_failure("u", &lost), Failure::Connect { .. }));
    }

    #[test]
    fn only_unusable_servers_are_infrastructure_failures() {
        let st = |code| Failure::Status {
            url: "u".into(),
            code,
        };
        for code in [500, 502, 503, 401, 403] {
            assert!(st(code).is_infra(), "{code}");
        }
        for code in [400, 404, 409, 413] {
            assert!(!st(code).is_infra(), "{code}");
        }
        assert!(Failure::Timeout { url: "u".into() }.is_infra());
        assert!(!Failure::Unsigned { key: "k".into() }.is_infra());
        assert!(!Failure::Tampered {
            url: "u".into(),
            why: "w".into()
        }
        .is_infra());
    }
}
