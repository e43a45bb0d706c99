// Upstream's `#![deny(warnings)]` is gone: as a path dependency this crate's lints are not
// capped, so a lint new in some rustc would have failed every build of the workspace.
#![allow(non_snake_case, non_camel_case_types, non_upper_case_globals)]
#![allow(deref_nullptr)] // TODO(fxbug.dev/74605): Remove once bindgen is fixed.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use libc::*;

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

mod opcode;
mod types;
mod verbs;

pub use self::opcode::*;
pub use self::types::*;
pub use self::verbs::*;
