//! The datapath's config as the Python control plane writes it (docs/datapath.md): a link
//! direction and its queue, resolved once into bloatlab-core's types. bloatlab-link reads its
//! links' directions with it and bloatlab-replay the one it replays, so the two resolve a
//! config the same way. Errors name the field, on one line.

pub mod direction;
pub mod queue;

pub use direction::{CaptureJson, Direction, DirectionJson};
pub use queue::{QueueJson, DISCIPLINES};

/// Reads a JSON file into `T`; an error names the offending field (or the file), on one line.
pub fn load_json<T: serde::de::DeserializeOwned>(path: &str) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("config {path}: {e}"))?;
    parse_json(&text, path)
}

/// `load_json` for text read from `path`.
fn parse_json<T: serde::de::DeserializeOwned>(text: &str, path: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text)).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        if field == "." { format!("config {path}: {inner}") } else { format!("{field}: {inner}") }
    })
}
