//! bloatlab's version is written once, in src/bloatlab/version.py; the binaries report it
//! (`--version`), and `bloatlab --version` refuses binaries of another version.

use std::path::Path;

fn main() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../src/bloatlab/version.py");
    println!("cargo:rerun-if-changed={}", file.display());
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let version = text
        .lines()
        .find_map(|line| line.strip_prefix("__version__ = \"")?.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{}: no line __version__ = \"X.Y.Z\"", file.display()));
    println!("cargo:rustc-env=BLOATLAB_VERSION={version}");
}
