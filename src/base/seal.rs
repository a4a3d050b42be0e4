//! Seals on files scenerun keeps and later turns into commands (a `scenes_from`
//! generator's output in the cache, the kept parse of the manifest): a keyed BLAKE3 tag
//! over what the file is for (its domain and name, e.g. the generator's content key) and
//! its body, keyed by a per-user secret kept outside every cache dir. Invariant: a kept
//! file whose seal does not verify with this user's secret is never used — it is made
//! again — so a file planted by whoever can write the cache (another project, another
//! user, a restored `actions/cache` archive) never becomes a command (docs/cache-trust.md).
//!
//! The secret: 32 random bytes in `$XDG_STATE_HOME/scenerun/seal.key` (else
//! `~/.local/state/scenerun/seal.key`), created once with mode 0600 in a 0700 directory,
//! read without following a link, and used only when it is a regular file of this user
//! that no one else can read or write. Without a usable one, this process makes a secret
//! of its own: nothing kept by an earlier run verifies, so every generator runs again.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SECRET_LEN: usize = 32;

/// The file that holds the secret, when the environment names a home for it.
pub fn secret_path() -> Option<PathBuf> {
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?)
            .join(".local")
            .join("state"),
    };
    Some(state.join("scenerun").join("seal.key"))
}

/// This user's secret, read (or made) once per process.
fn secret() -> &'static [u8; SECRET_LEN] {
    static SECRET: OnceLock<[u8; SECRET_LEN]> = OnceLock::new();
    SECRET.get_or_init(|| match secret_path().map(|p| (load_or_make(&p), p)) {
        Some((Ok(s), _)) => s,
        Some((Err(e), path)) => {
            crate::base::warning::post(crate::base::notice::Notice::SealKey {
                path,
                error: e.to_string(),
            });
            random()
        }
        None => random(),
    })
}

/// 32 bytes from the kernel's random source.
fn random() -> [u8; SECRET_LEN] {
    let mut buf = [0u8; SECRET_LEN];
    let mut got = 0;
    while got < SECRET_LEN {
        // SAFETY: the pointer and length name the unfilled tail of `buf`.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), SECRET_LEN - got, 0) };
        if n > 0 {
            got += n as usize;
        } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // No random source at all: a secret no one can guess is still one this
            // process alone knows (its address-space layout and clock).
            let fallback = blake3::hash(
                format!(
                    "{:?}{}{:p}",
                    std::time::SystemTime::now(),
                    std::process::id(),
                    &buf
                )
                .as_bytes(),
            );
            return *fallback.as_bytes();
        }
    }
    buf
}

/// Read the secret at `path`, or make it when there is none. Made by one `link` of a
/// fully written private file, so concurrent first runs agree on one secret.
fn load_or_make(path: &Path) -> io::Result<[u8; SECRET_LEN]> {
    match load(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    let dir = path.parent().expect("the key file has a directory");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = dir.join(format!(
        ".seal.key.{}.{}",
        std::process::id(),
        crate::base::fsutil::unique()
    ));
    let secret = random();
    let written = fs::File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&secret).and_then(|_| f.sync_all()));
    let linked = written.and_then(|_| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(secret),
        // Another process made it first: its secret is the one.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => load(path),
        Err(e) => Err(e),
    }
}

/// The secret at `path`: a regular file (no link followed, no FIFO waited on) of this
/// user, readable and writable by no one else, of exactly 32 bytes.
fn load(path: &Path) -> io::Result<[u8; SECRET_LEN]> {
    let mut f = fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let m = f.metadata()?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    let refuse = |why: &str| Err(io::Error::other(why.to_string()));
    if !m.is_file() {
        return refuse("it is not a regular file");
    }
    if m.uid() != me {
        return refuse("it belongs to another user");
    }
    if m.mode() & 0o077 != 0 {
        return refuse("other users may read or write it (it must be mode 0600)");
    }
    if m.len() != SECRET_LEN as u64 {
        return refuse("it does not hold 32 bytes");
    }
    let mut buf = [0u8; SECRET_LEN];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

/// The seal of `body` kept as `name` in `domain`, as 64 hex digits.
pub fn tag(domain: &str, name: &str, body: &[u8]) -> String {
    keyed(secret(), domain, name, body).to_hex().to_string()
}

/// Whether `tag` is the seal of `body` kept as `name` in `domain` (compared in constant
/// time).
pub fn verify(domain: &str, name: &str, body: &[u8], tag: &str) -> bool {
    blake3::Hash::from_hex(tag).is_ok_and(|t| t == keyed(secret(), domain, name, body))
}

/// A seal made while the body is written (a large file need not exist whole first):
/// `Write` into it passes the bytes on to `inner` and into the seal.
pub struct Sealing<W> {
    inner: W,
    h: blake3::Hasher,
}

impl<W: Write> Sealing<W> {
    pub fn new(domain: &str, name: &str, inner: W) -> Sealing<W> {
        Sealing {
            inner,
            h: start(secret(), domain, name),
        }
    }

    /// The seal of everything written, and the writer.
    pub fn finish(self) -> (String, W) {
        (self.h.finalize().to_hex().to_string(), self.inner)
    }
}

impl<W: Write> Write for Sealing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.h.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn keyed(secret: &[u8; SECRET_LEN], domain: &str, name: &str, body: &[u8]) -> blake3::Hash {
    let mut h = start(secret, domain, name);
    h.update(body);
    h.finalize()
}

/// The keyed hasher with the length-prefixed domain and name in it.
fn start(secret: &[u8; SECRET_LEN], domain: &str, name: &str) -> blake3::Hasher {
    let mut h = blake3::Hasher::new_keyed(secret);
    for field in [domain.as_bytes(), name.as_bytes()] {
        h.update(&(field.len() as u64).to_le_bytes());
        h.update(field);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_binds_the_secret_the_name_and_the_body() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let t = keyed(&a, "scenes_from", "k1", b"body");
        assert_eq!(t, keyed(&a, "scenes_from", "k1", b"body"));
        assert_ne!(t, keyed(&b, "scenes_from", "k1", b"body"), "another user's");
        assert_ne!(
            t,
            keyed(&a, "scenes_from", "k2", b"body"),
            "copied to another key"
        );
        assert_ne!(
            t,
            keyed(&a, "manifest", "k1", b"body"),
            "another kind of file"
        );
        assert_ne!(t, keyed(&a, "scenes_from", "k1", b"bodY"));
        // Lengths are part of it: no shifting of bytes between name and body.
        assert_ne!(keyed(&a, "d", "ab", b"c"), keyed(&a, "d", "a", b"bc"));
    }

    #[test]
    fn the_secret_is_made_once_private_and_refused_when_others_can_read_it() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("scenerun").join("seal.key");
        let s = load_or_make(&p).unwrap();
        assert_eq!(load_or_make(&p).unwrap(), s, "read back, not made again");
        let m = fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        assert_eq!(
            fs::metadata(p.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_make(&p).is_err());
        fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &p).unwrap();
        assert!(load_or_make(&p).is_err(), "a link is not followed");
    }
}
