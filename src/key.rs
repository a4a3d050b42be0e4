//! Content keys (docs/cache.md): the versioned, length-prefixed encoding hashed with
//! BLAKE3 (`hasher`), the `#include` scanner and include graph (`includes`), the
//! closures walked over it (`closure`, kept across runs by `closure_memo`), and the
//! persistent stat memo that lets an unchanged file skip re-reading (`files`). Keys
//! never contain an absolute path of the checkout: files inside the manifest's
//! directory are named relative to it.

mod closure;
mod closure_memo;
mod files;
mod hasher;
mod includes;
pub mod inputs;

pub use closure::{Closure, ClosureSet};
pub use files::{DepLookup, DepNow, FileInfo, Files};
pub use hasher::{key_name, key_path, normalize, KeyHasher, KEY_SCHEMA};
pub use includes::{scan_includes, Include, Node, NotAnInclude};

#[cfg(test)]
use files::RACY_NS;
use files::{now_ns, settled};
use includes::{dirs_key, Graph, IdHash, Listing, PathKey, SCAN_LIMIT};
