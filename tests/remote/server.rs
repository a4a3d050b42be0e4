//! A real nginx with WebDAV PUT (the config kept in `fixtures/nginx/`), started per test
//! as a non-daemon single process under a temp prefix on a free loopback port, killed
//! when dropped. No nginx: the test fails with a message saying how to install it.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::wait_until;

pub const TOKEN: &str = "fleet-secret-token";
const CONF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/nginx/remote-cache.conf.in"
);

pub struct Nginx {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

/// The nginx binary: on PATH, or where Debian puts it (/usr/sbin is not on every PATH).
pub fn nginx_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("nginx"))
            .find(|c| c.is_file())
    });
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.is_file()))
        .unwrap_or_else(|| {
            panic!(
                "nginx is not installed: the remote-cache tests run against a real nginx \
                 (Debian: `apt-get install -y nginx`; .ci/run installs it)"
            )
        })
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Nginx {
    pub fn start() -> Nginx {
        let bin = nginx_binary();
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path();
        fs::create_dir_all(prefix.join("tmp")).unwrap();
        fs::create_dir_all(prefix.join("data")).unwrap();
        let template = fs::read_to_string(CONF).unwrap();
        // Another process may take the port between our probe and nginx's bind: retry.
        for _ in 0..5 {
            let port = free_port();
            let conf = template
                .replace("@PREFIX@", &prefix.display().to_string())
                .replace("@PORT@", &port.to_string())
                .replace("@TOKEN@", TOKEN);
            let conf_path = prefix.join("nginx.conf");
            fs::write(&conf_path, conf).unwrap();
            let mut child = Command::new(&bin)
                .arg("-p")
                .arg(prefix)
                .arg("-c")
                .arg(&conf_path)
                .arg("-e")
                .arg(prefix.join("error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(prefix.join("stderr.log")).unwrap())
                .spawn()
                .expect("starting nginx");
            let up = wait_until(Duration::from_secs(30), || {
                matches!(child.try_wait(), Ok(Some(_)))
                    || TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            if up && matches!(child.try_wait(), Ok(None)) {
                return Nginx { dir, port, child };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "nginx did not start; its stderr:\n{}\nerror.log:\n{}",
            fs::read_to_string(prefix.join("stderr.log")).unwrap_or_default(),
            fs::read_to_string(prefix.join("error.log")).unwrap_or_default()
        );
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/scenerun", self.port)
    }

    /// What the server stores under the URL's path (`cas/`, `ac/`).
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data/scenerun")
    }

    /// Files stored under `data()/<sub>` (`cas` or `ac`).
    pub fn stored(&self, sub: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(self.data().join(sub))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Requests in the access log whose request line starts with `method` and whose path
    /// contains `part`.
    pub fn requests(&self, method: &str, part: &str) -> usize {
        fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.split('"')
                    .nth(1)
                    .is_some_and(|r| r.starts_with(&format!("{method} ")) && r.contains(part))
            })
            .count()
    }

    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port that refuses connections for as long as the returned socket lives:
/// bound but not listening, so no other test's server can take it meanwhile.
pub struct RefusingPort {
    fd: i32,
    pub port: u16,
}

impl RefusingPort {
    pub fn new() -> RefusingPort {
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0);
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let rc = libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len);
            assert_eq!(rc, 0, "bind");
            let mut got: libc::sockaddr_in = std::mem::zeroed();
            let mut glen = len;
            libc::getsockname(fd, &mut got as *mut _ as *mut libc::sockaddr, &mut glen);
            RefusingPort {
                fd,
                port: u16::from_be(got.sin_port),
            }
        }
    }
}

impl Drop for RefusingPort {
    fn drop(&mut self) {
        unsafe { libc::close(self.fd) };
    }
}

/// Flip one byte in the middle of a file, keeping its size.
pub fn flip_byte(p: &Path) {
    let mut b = fs::read(p).unwrap();
    let i = b.len() / 2;
    b[i] ^= 0xff;
    fs::write(p, b).unwrap();
}
