//! Packing device work onto granted ids (docs/lanes.md, packing): `input` builds the
//! packer's jobs from the scenes' device steps and the lanes, `packer` packs them (for
//! the `--plan` preview, simulated with estimates, and for the inner run alike), and
//! `scheduler` is the packing in action inside the lock: what starts on which ids as
//! jobs end, retries and reruns included. Invariant: the preview and the inner run pack
//! through the same builder and the same packer, so the preview shows what will happen.

pub mod input;
pub mod packer;
pub mod scheduler;
