//! The messages of the one Python server's protocol (docs/warm.md "The protocol"), as
//! types: `schemas/server_*.schema.json` are generated from them (src/schemas.rs), one
//! file per message, and the plugin's tests hold its messages to those files.
//! Invariants: one request type for a warm step and a lane process alike, one framing
//! for every message on the socket (a 4-byte big-endian length, then that much JSON;
//! descriptors ride on its first byte), and one list of the variables a forked child
//! cannot take (`START_ONLY_NAMES`, `START_ONLY_PREFIXES`).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

/// The variable naming the server's socket: set for the server (it listens there) and for
/// a lane process (it asks there).
pub const SOCKET_ENV: &str = "SCENERUN_FORK_SERVER";

/// Variables an interpreter, or a library the server preloaded, reads only when it
/// starts: a child whose value differs from the server's is not forked (it runs as a
/// process, or the lane as written). Every name in this list ...
pub const START_ONLY_NAMES: &[&str] = &[
    "VIRTUAL_ENV",
    "HOME",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MALLOC_ARENA_MAX",
    "GLIBC_TUNABLES",
    "TZ",
];
/// ... and every name with one of these prefixes.
pub const START_ONLY_PREFIXES: &[&str] = &["PYTHON", "LD_"];

/// Whether `name` is read only when an interpreter starts.
pub fn is_start_only(name: &str) -> bool {
    START_ONLY_NAMES.contains(&name) || START_ONLY_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The longest message scenerun reads from the server.
const MAX_MESSAGE: u32 = 1 << 20;

/// Once, first, one JSON line on the server's stdout: it took its imports and serves
/// on its socket now.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Ready {
    /// Always true.
    pub ready: bool,
    /// The process that forks the children (its memory and its children's are watched).
    pub pid: i32,
    /// Its threads when it became ready (a fork copies only the calling one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// How many modules it preloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<u32>,
}

/// A request for a child that is `python -m MODULE ARGS...` run in `cwd` with exactly
/// `env`, its stdin, stdout and stderr the three descriptors sent with it. scenerun
/// sends it for a warm step, `python -m scenerun_pytest fork` for a lane process.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(transform = start_only_env))]
pub struct Request {
    pub module: String,
    pub args: Vec<String>,
    pub cwd: String,
    /// The child's whole environment.
    pub env: BTreeMap<String, String>,
    /// The process group the child joins (a lane process's own). Absent: it stays in the
    /// server's group (a warm step: scenerun keeps the step's timeout on that group), and
    /// what it leaves running is killed when it ends, before `ended` is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgid: Option<i32>,
    /// The interpreter the asking process is; must equal the server's. Absent: the
    /// server's own (scenerun asks for the command its worker was started as).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<Interpreter>,
    /// What the asking process's command line set before `python`; the child takes it,
    /// or the request is refused. Absent: the server's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessState>,
}

/// What an interpreter reads when it starts.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Interpreter {
    pub executable: String,
    /// `sys.flags`, by name.
    pub flags: BTreeMap<String, Flag>,
    /// `-X` options.
    pub xoptions: BTreeMap<String, String>,
    /// `-W` options.
    pub warnoptions: Vec<String>,
}

/// A `sys.flags` value.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub enum Flag {
    Bool(bool),
    Int(i64),
}

/// A process's state that a fork does not carry over: umask, `ulimit`, `nice`, `taskset`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ProcessState {
    #[cfg_attr(test, schemars(range(max = 511)))]
    pub umask: u32,
    /// `RLIMIT_*` by name: (soft, hard); -1 is unlimited.
    pub rlimits: BTreeMap<String, [i64; 2]>,
    pub nice: i32,
    /// The CPUs it may run on.
    #[cfg_attr(test, schemars(length(min = 1)))]
    pub affinity: Vec<u32>,
}

/// The child exists and waits for the asker's confirming byte `1` (it runs only once
/// that came, so an asker that gave up never leaves a twin).
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Started {
    pub pid: i32,
}

/// No child, and why: the step runs as a process, the lane as written.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Refused {
    pub error: String,
}

/// How the child ended: its wait status, as `waitpid` gives it.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Ended {
    pub status: i32,
}

/// The answer to a request: `Started` or `Refused`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Answer {
    Started(Started),
    Refused(Refused),
}

impl Ended {
    /// As `proc` says how a process ended.
    pub fn ended(&self) -> super::Ended {
        let s = self.status;
        if libc::WIFSIGNALED(s) {
            super::Ended::Signaled(libc::WTERMSIG(s))
        } else {
            super::Ended::Exited(libc::WEXITSTATUS(s))
        }
    }
}

/// The start-only lists, in the request's schema (`x-start-only-env`), where the plugin
/// reads them from.
#[cfg(test)]
fn start_only_env(schema: &mut schemars::Schema) {
    schema.insert(
        "x-start-only-env".into(),
        serde_json::json!({
            "description": "Variables an interpreter, or a library the server preloaded, reads only when it starts: a request whose `env` has another value of one than the server's is refused. Every name in `names`, and every name with one of `prefixes`.",
            "names": START_ONLY_NAMES,
            "prefixes": START_ONLY_PREFIXES,
        }),
    );
}

/// Send `msg` framed, with `fds` on its first byte.
pub fn send(stream: &UnixStream, msg: &impl Serialize, fds: &[RawFd]) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(io::Error::other)?;
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let first = send_with_fds(stream, &frame, fds)?;
    (&*stream).write_all(&frame[first..])
}

/// One `sendmsg` of (a first part of) `data` with `fds` as SCM_RIGHTS; the bytes sent.
fn send_with_fds(stream: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.is_empty() {
        return (&*stream).write(data);
    }
    let payload = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call,
    // and the control buffer is CMSG_SPACE(payload) bytes, room for one header and fds.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(cmsg), payload);
        let n = libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// Read one framed message (the stream's read timeout applies); None at end of stream.
/// A read that times out part-way is an error (the conversation is broken).
pub fn recv<T: serde::de::DeserializeOwned>(stream: &UnixStream) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match (&*stream).read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let n = u32::from_be_bytes(len);
    if n > MAX_MESSAGE {
        return Err(io::Error::other(format!("a message of {n} bytes")));
    }
    let mut body = vec![0u8; n as usize];
    (&*stream).read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::other(format!("a message that is not one: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_and_its_descriptors_cross_a_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        send(&a, &Started { pid: 7 }, &[file.as_raw_fd()]).unwrap();
        let got: Started = recv(&b).unwrap().unwrap();
        assert_eq!(got.pid, 7);
        drop(a);
        assert!(recv::<Started>(&b).unwrap().is_none());
    }

    #[test]
    fn an_answer_is_started_or_refused_and_a_wait_status_is_read_as_proc_says() {
        let a: Answer = serde_json::from_str(r#"{"pid": 3}"#).unwrap();
        assert!(matches!(a, Answer::Started(Started { pid: 3 })));
        let a: Answer = serde_json::from_str(r#"{"error": "why"}"#).unwrap();
        assert!(matches!(a, Answer::Refused(_)));
        assert_eq!(
            Ended { status: 9 }.ended(),
            super::super::Ended::Signaled(9)
        );
        assert_eq!(
            Ended { status: 3 << 8 }.ended(),
            super::super::Ended::Exited(3)
        );
    }

    #[test]
    fn the_start_only_variables() {
        for v in [
            "PYTHONHASHSEED",
            "PYTHONOPTIMIZE",
            "PYTHONPATH",
            "LD_LIBRARY_PATH",
            "LD_PRELOAD",
            "VIRTUAL_ENV",
        ] {
            assert!(is_start_only(v), "{v}");
        }
        for v in ["PATH", "SCENERUN_DEVICES", "MY_FLAG"] {
            assert!(!is_start_only(v), "{v}");
        }
    }
}
