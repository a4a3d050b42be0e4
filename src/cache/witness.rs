//! What a device run's compiler shims published, told to the run itself over a socket it
//! owns (docs/cache-trust.md, "Compiles the tests start"): the only word `device` signs
//! compiled entries on. Invariant: an entry is signed only when a `scenerun` process
//! (this very executable, checked through the socket peer's credentials, never a line a
//! step wrote) told the run it published that key with those files, and the entry,
//! re-hashed under its key lock when the run ends, is still exactly that. The compile
//! log (`compiles.jsonl`) only counts.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{guard, FileRecord, Kind, Store};

/// One file as the shim published it: path in `out`, size, BLAKE3.
pub type Told = (String, u64, String);

/// The largest message a shim sends (one entry's file list).
const MAX_MESSAGE: u64 = 1 << 20;

/// The run's end of the socket: every (key → files) a shim told it, the latest word kept
/// (what the entry holds now, if nothing changed it since).
pub struct Witness {
    path: PathBuf,
    told: Arc<Mutex<BTreeMap<String, Vec<Told>>>>,
    /// The first peer of this user refused for not running this executable.
    refused: Arc<Mutex<Option<Refused>>>,
}

/// A peer of this user that was not running this executable: its pid, what the kernel
/// says it runs, and what this run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub pid: i32,
    pub runs: PathBuf,
    pub me: PathBuf,
}

/// A key as scenerun makes them: 64 lowercase hex digits.
pub fn is_key(key: &str) -> bool {
    key.len() == 64 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Witness {
    /// Listen at `path` (in the run's own directory), answering each shim on a thread.
    pub fn listen(path: &Path) -> std::io::Result<Witness> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        let told: Arc<Mutex<BTreeMap<String, Vec<Told>>>> = Arc::default();
        let kept = told.clone();
        let refused: Arc<Mutex<Option<Refused>>> = Arc::default();
        let first_refused = refused.clone();
        let me = std::fs::read_link("/proc/self/exe")?;
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let heard = receive(stream, &me).map_err(|r| {
                    let mut first = first_refused
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    first.get_or_insert(r);
                });
                if let Ok(Some((key, files))) = heard {
                    // The latest word: a second compile of the same key (its twin
                    // was not signed yet, so it missed) replaced the entry.
                    kept.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(key, files);
                }
            }
        });
        Ok(Witness {
            path: path.to_path_buf(),
            told,
            refused,
        })
    }

    /// The first peer of this user refused for running another executable, if any: what
    /// such a peer told is never signed. Under qemu-user the kernel shows the emulator
    /// as every emulated process's executable, so each shim is refused there.
    pub fn refused(&self) -> Option<Refused> {
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sign each entry a shim told of whose content is still what it told (`sign_told`);
    /// how many were signed.
    pub fn sign_told(&self, store: &Store) -> usize {
        let told = self
            .told
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        told.iter()
            .filter(|(key, files)| store.sign_told(Kind::Compiled, key, files).unwrap_or(false))
            .count()
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One shim's message, when its sender is this executable run by this user: the key and
/// files it published. Answered `ok` once kept, so the shim exits only after (its pid
/// is still its own while `/proc/<pid>/exe` is read). Err: a peer of this user running
/// another executable; Ok(None): anything else not taken.
fn receive(stream: UnixStream, me: &Path) -> Result<Option<(String, Vec<Told>)>, Refused> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let Some((pid, uid)) = peer(&stream) else {
        return Ok(None);
    };
    // SAFETY: geteuid has no preconditions.
    if uid != unsafe { libc::geteuid() } {
        return Ok(None);
    }
    let Ok(runs) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return Ok(None);
    };
    if runs != me {
        return Err(Refused {
            pid,
            runs,
            me: me.to_path_buf(),
        });
    }
    let mut line = Vec::new();
    let mut r = BufReader::new(std::io::Read::take(&stream, MAX_MESSAGE));
    if r.read_until(b'\n', &mut line).is_err() {
        return Ok(None);
    }
    let Ok((key, files)) = serde_json::from_slice::<(String, Vec<Told>)>(&line) else {
        return Ok(None);
    };
    if !is_key(&key) || files.is_empty() {
        return Ok(None);
    }
    let _ = (&stream).write_all(b"ok\n");
    Ok(Some((key, files)))
}

/// The pid and uid of the process at the other end of `stream` (`SO_PEERCRED`).
fn peer(stream: &UnixStream) -> Option<(i32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are live locals of the sizes getsockopt is told.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some((cred.pid, cred.uid))
}

/// The shim's side: tell the run at `socket` what it published under `key`, and wait
/// for its answer (bounded). An error only means the run will not sign it.
pub fn tell(socket: &Path, key: &str, files: &[FileRecord]) -> std::io::Result<()> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let told: Vec<Told> = files
        .iter()
        .map(|f| (f.path.clone(), f.size, f.blake3.clone()))
        .collect();
    let mut line = serde_json::to_vec(&(key, told)).map_err(std::io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)?;
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer)?;
    match answer.trim() {
        "ok" => Ok(()),
        _ => Err(std::io::Error::other("the run did not take it")),
    }
}

impl Store {
    /// Sign the record of an entry published unsigned by a shim (which never holds the
    /// signing key) with this process's key, when the shim told this run of it: under
    /// the entry's key lock, its record must list exactly the files told, its `out`
    /// must list exactly those (`check_listing`), and each file re-hashed now must have
    /// the told size and BLAKE3. `true` when it was signed here; `false` when this
    /// process cannot sign, or the entry is gone, signed already, or not what was told.
    pub fn sign_told(&self, kind: Kind, key: &str, told: &[Told]) -> anyhow::Result<bool> {
        if !self.keys.signs() || !is_key(key) {
            return Ok(false);
        }
        let _lock = self.lock_key(kind, key)?;
        let dir = match self.entry_checked(kind, key) {
            Ok(Some(dir)) => dir,
            _ => return Ok(false),
        };
        let Ok(Some(mut meta)) = super::read_meta(&dir) else {
            return Ok(false);
        };
        let recorded: Vec<Told> = meta
            .files
            .iter()
            .map(|f| (f.path.clone(), f.size, f.blake3.clone()))
            .collect();
        if meta.signature.is_some() || meta.kind != kind || meta.key != key || recorded != told {
            return Ok(false);
        }
        let out = dir.join("out");
        if guard::check_listing(&out, &meta.files).is_err() {
            return Ok(false);
        }
        let intact = meta.files.iter().all(|f| {
            let path = match f.path.is_empty() {
                true => out.clone(),
                false => out.join(&f.path),
            };
            super::digest_in_cache(&path, super::Digester::new())
                .is_ok_and(|d| d.size == f.size && d.blake3 == f.blake3)
        });
        if !intact {
            return Ok(false);
        }
        self.keys.sign(&mut meta);
        let path = dir.join("meta.json");
        crate::base::fsutil::write_atomic(
            &path,
            &serde_json::to_vec(&meta).expect("meta serializes"),
        )
        .map_err(|e| super::infra(e, "write", &path))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message from this very executable is taken; one from another program of the
    /// same user is not, and the run can say which program that was.
    #[test]
    fn only_this_executable_is_heard_and_the_first_other_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let w = Witness::listen(&dir.path().join("compiles.sock")).unwrap();
        let key = "ab".repeat(32);
        let file = FileRecord {
            path: "out.o".into(),
            size: 3,
            blake3: "00".repeat(32),
            stamp: None,
        };
        tell(w.path(), &key, std::slice::from_ref(&file)).expect("heard");
        assert!(w.told.lock().unwrap().contains_key(&key));
        assert_eq!(w.refused(), None);
        let other = std::process::Command::new("python3")
            .args([
                "-c",
                "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ntry:\n    s.sendall(b'[\"' + b'cd' * 32 + b'\", [[\"x\", 1, \"00\"]]]\\n')\n    print(s.recv(10))\nexcept OSError:\n    print(b'')",
            ])
            .arg(w.path())
            .output()
            .expect("python3");
        assert!(other.status.success(), "{other:?}");
        assert_eq!(
            String::from_utf8_lossy(&other.stdout).trim(),
            "b''",
            "no ok"
        );
        // Noted just after its connection is dropped: wait for it, bounded.
        let t = std::time::Instant::now();
        while w.refused().is_none() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let r = w.refused().expect("the other program is named");
        assert_ne!(r.runs, r.me);
        assert!(r.runs.to_string_lossy().contains("python3"), "{r:?}");
        assert!(!w.told.lock().unwrap().contains_key(&"cd".repeat(32)));
    }

    #[test]
    fn keys_are_64_lowercase_hex_digits() {
        assert!(is_key(&"ab".repeat(32)));
        for bad in ["", "ab", "a\u{e9}", &"AB".repeat(32), "../../etc/passwd"] {
            assert!(!is_key(bad), "{bad}");
        }
    }
}
