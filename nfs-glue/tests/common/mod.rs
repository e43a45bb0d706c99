pub mod memfs;
