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
        one_line(if field == "." { format!("config {path}: {inner}") } else { format!("{field}: {inner}") })
    })
}

/// The message with its control characters escaped: serde quotes an unknown key as it is, and a
/// key may hold a newline (`"\n"` in the JSON), where the message must stay one line.
fn one_line(message: String) -> String {
    if !message.contains(char::is_control) {
        return message;
    }
    message.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzz target `link`: a key with a control character (`"f\rward"`, one byte
    /// of "forward" edited into a backslash) came back raw in the error, which then spanned
    /// lines where bloatlab-link promises one.
    #[test]
    fn an_error_about_a_key_with_a_newline_is_one_line() {
        let e = parse_json::<DirectionJson>(r#"{"f\nward": 1, "queue": {"discipline": "droptail", "packets": 1}}"#, "x.json").err().unwrap();
        assert!(e.starts_with(r"f\nward: unknown field `f\nward`, expected one of"), "{e}");
        assert!(!e.contains(['\n', '\r']));
        let e = parse_json::<DirectionJson>(r#"{"queue": {"discipline": "droptail", "pa\u0000ckets": 1}}"#, "x.json").err().unwrap();
        assert!(e.starts_with(r"queue.pa\u{0}ckets: unknown field"), "{e}");
    }
}
