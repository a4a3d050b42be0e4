//! Digests of the bytes of cached files, computed in one pass: the size and BLAKE3 that a
//! local integrity record holds (docs/cache.md), plus the sha256 that names a blob on the
//! remote cache when the bytes travel (docs/remote-cache.md). Every file the cache hashes
//! goes through `Digester`, so no byte is hashed twice for one record and the hex
//! rendering is written once.
//!
//! `copy` is the download path: it writes a stream to a file and digests it on a second
//! thread at the same time, so a blob costs one pass over its bytes, like `curl -o`, and
//! its local record is known when the last byte lands. Nothing here syncs to disk: the
//! cache's durability is the atomic rename of a whole entry (safe against `kill -9`), not
//! `fsync`, and a download keeps exactly that.

use std::io::{self, Read, Write};
use std::sync::mpsc;

use sha2::{Digest, Sha256};

/// Bytes per write and per hand-off to the hashing thread. Measured on a 2-core Zen 4 VM
/// (1 MiB L2) with a 1 GiB download: 1 MiB chunks made the kernel's copy into the page
/// cache 2–4× dearer (a chunk plus its page-cache destination no longer fit in L2; `dd`
/// shows the same for writes ≥ 512 KiB), 128 KiB chunks cost 6,000 thread hand-offs per
/// GiB; 256 KiB was fastest (bench/README.md).
const CHUNK: usize = 256 << 10;
/// Chunks of a `copy` in flight: being filled, waiting, being hashed.
const IN_FLIGHT: usize = 4;

/// What one pass over a file's bytes gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digests {
    pub size: u64,
    pub blake3: String,
    /// Only when asked for (`Digester::with_sha256`).
    pub sha256: Option<String>,
}

/// Size and BLAKE3, and sha256 when asked for, fed chunk by chunk.
pub struct Digester {
    size: u64,
    blake3: blake3::Hasher,
    sha256: Option<Sha256>,
}

impl Digester {
    /// What a local integrity record needs: size and BLAKE3.
    pub fn new() -> Digester {
        Digester {
            size: 0,
            blake3: blake3::Hasher::new(),
            sha256: None,
        }
    }

    /// A local record's digests and the remote blob name, in the same pass.
    pub fn with_sha256() -> Digester {
        Digester {
            sha256: Some(Sha256::new()),
            ..Digester::new()
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        self.blake3.update(bytes);
        if let Some(s) = &mut self.sha256 {
            s.update(bytes);
        }
    }

    pub fn finish(self) -> Digests {
        Digests {
            size: self.size,
            blake3: self.blake3.finalize().to_hex().to_string(),
            sha256: self.sha256.map(|s| hex(&s.finalize())),
        }
    }

    /// Digest everything `from` gives (a file being verified or uploaded).
    pub fn read_all(mut self, mut from: impl Read) -> io::Result<Digests> {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf) {
                Ok(0) => return Ok(self.finish()),
                Ok(k) => self.update(&buf[..k]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Default for Digester {
    fn default() -> Self {
        Digester::new()
    }
}

/// Why a `copy` stopped. The caller decides what each means (the server's fault or the
/// local disk's).
#[derive(Debug)]
pub enum CopyError {
    Read(io::Error),
    Write(io::Error),
    /// The stream went on past `limit` bytes.
    TooLong,
}

/// Copy `from` into `to`, at most `limit` bytes, digesting the bytes on a second thread
/// while the next chunk is read and written; `moved(n)` is told of every chunk as it
/// lands. On two cores a download then costs about one pass, not a pass plus a hash of
/// everything afterwards. On an error `to` holds a prefix of the stream: the caller
/// throws it away (it is in a staging directory, never published).
pub fn copy(
    mut from: impl Read,
    mut to: impl Write,
    digester: Digester,
    limit: u64,
    mut moved: impl FnMut(u64),
) -> Result<Digests, CopyError> {
    // Chunks go to the hashing thread full and come back empty; `IN_FLIGHT` of them are
    // allocated once, so a gigabyte costs no allocation and no memset per chunk.
    let (full_tx, full_rx) = mpsc::sync_channel::<(Box<[u8]>, usize)>(IN_FLIGHT);
    let (free_tx, free_rx) = mpsc::channel::<Box<[u8]>>();
    for _ in 0..IN_FLIGHT {
        free_tx
            .send(vec![0u8; CHUNK].into_boxed_slice())
            .expect("receiver alive");
    }
    std::thread::scope(|s| {
        let hashing = s.spawn(move || {
            let mut d = digester;
            for (buf, len) in full_rx {
                d.update(&buf[..len]);
                // The copy loop may have stopped on an error; then nobody takes it back.
                let _ = free_tx.send(buf);
            }
            d.finish()
        });
        let copied = (|| {
            let mut total = 0u64;
            loop {
                let mut buf = free_rx
                    .recv()
                    .expect("the hashing thread hands chunks back");
                let len = fill(&mut from, &mut buf).map_err(CopyError::Read)?;
                if len == 0 {
                    return Ok(());
                }
                total += len as u64;
                if total > limit {
                    return Err(CopyError::TooLong);
                }
                to.write_all(&buf[..len]).map_err(CopyError::Write)?;
                moved(len as u64);
                full_tx.send((buf, len)).expect("the hashing thread runs");
            }
        })();
        // Closing the channel ends the hashing thread.
        drop(full_tx);
        let digests = hashing.join().expect("hashing thread");
        copied.map(|()| digests)
    })
}

/// Read until `buf` is full or the stream ends: a body reader gives at most its own
/// buffer's worth per call, and a full chunk per hand-off keeps those few.
fn fill(from: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = 0;
    while len < buf.len() {
        match from.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(k) => len += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(len)
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA256_ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn one_pass_gives_what_separate_hashes_give() {
        // Larger than a chunk and not a multiple of it, so chunk edges are crossed.
        let data: Vec<u8> = (0..CHUNK * 3 + 12_345)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let want_blake3 = blake3::hash(&data).to_hex().to_string();
        let want_sha256 = hex(&Sha256::digest(&data));

        let d = Digester::with_sha256().read_all(&data[..]).unwrap();
        assert_eq!(d.size, data.len() as u64);
        assert_eq!(d.blake3, want_blake3);
        assert_eq!(d.sha256.as_deref(), Some(want_sha256.as_str()));
        assert_eq!(Digester::new().read_all(&data[..]).unwrap().sha256, None);

        let mut out = Vec::new();
        let mut seen = 0;
        let c = copy(
            &data[..],
            &mut out,
            Digester::with_sha256(),
            u64::MAX,
            |n| seen += n,
        )
        .unwrap();
        assert_eq!(out, data);
        assert_eq!(seen, data.len() as u64);
        assert_eq!(c, d);
    }

    #[test]
    fn known_sha256_and_empty_input() {
        let d = Digester::with_sha256().read_all(&b"abc"[..]).unwrap();
        assert_eq!(d.sha256.as_deref(), Some(SHA256_ABC));
        let e = copy(&b""[..], Vec::new(), Digester::new(), 0, |_| {}).unwrap();
        assert_eq!(e.size, 0);
        assert_eq!(e.blake3, blake3::hash(b"").to_hex().to_string());
    }

    #[test]
    fn a_stream_past_its_limit_stops() {
        let data = vec![7u8; CHUNK * 2];
        let r = copy(&data[..], Vec::new(), Digester::new(), CHUNK as u64, |_| {});
        assert!(matches!(r, Err(CopyError::TooLong)));
    }

    #[test]
    fn errors_say_which_side_failed() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("connection reset"))
            }
        }
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let r = copy(Broken, Vec::new(), Digester::new(), u64::MAX, |_| {});
        assert!(matches!(r, Err(CopyError::Read(_))));
        let r = copy(&b"x"[..], Broken, Digester::new(), u64::MAX, |_| {});
        assert!(matches!(r, Err(CopyError::Write(_))));
    }
}
