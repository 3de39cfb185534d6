//! Each setting as `settings!` declares it (name, doc, kind of value, default) and how a value
//! reads in the README's table, with the prefix of the environment variables.

use std::net::SocketAddr;

use domain::UsdAmount;
use tracing_subscriber::filter::Targets;

use super::values::{LogFormat, MediaLinks, ModelAliasSetting, Secret, Span, UpstreamEndpoint};

/// The prefix of the environment variables read.
pub const PREFIX: &str = "GATEWAY_";

/// One setting as `settings!` declares it.
#[derive(Debug, Clone)]
pub struct Declared {
    /// The field's name: the file key, and the variable's name after `GATEWAY_` in capitals.
    pub name: &'static str,
    /// The doc comment, one entry per line.
    pub doc: &'static [&'static str],
    /// The kind of value it takes, in the README's words.
    pub kind: &'static str,
    /// The default as the README shows it.
    pub default: String,
    /// Whether only the configuration file can set it (no variable).
    pub file_only: bool,
}

impl Declared {
    /// The environment variable, or the file key of a setting only the file can set.
    pub fn variable(&self) -> String {
        if self.file_only {
            format!("`{}` (file only)", self.name)
        } else {
            format!("`{PREFIX}{}`", self.name.to_ascii_uppercase())
        }
    }

    /// The default, with a byte count also in MiB or GiB.
    pub fn shown_default(&self) -> String {
        let bytes = self.name.ends_with("_bytes").then(|| self.default.trim_matches('`').parse::<u64>().ok());
        match bytes.flatten() {
            Some(n) if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} ({} GiB)", self.default, n >> 30),
            Some(n) if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} ({} MiB)", self.default, n >> 20),
            Some(n) if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} ({} KiB)", self.default, n >> 10),
            _ => self.default.clone(),
        }
    }

    /// The doc comment as one line of Markdown.
    pub fn text(&self) -> String {
        let words: Vec<&str> = self.doc.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect();
        words.join(" ").replace('|', "\\|")
    }
}

/// How a setting's type reads in the table: its kind and a default's text.
pub trait Shown {
    /// The kind of value, in the README's words.
    const KIND: &'static str;
    /// Whether only the configuration file can hold it.
    const FILE_ONLY: bool = false;
    /// The value as the table shows a default.
    fn shown(&self) -> String;
}

/// `value` in backticks, or `empty`.
fn code_or_empty(value: &str) -> String {
    if value.is_empty() { "empty".to_owned() } else { format!("`{value}`") }
}

impl Shown for u64 {
    const KIND: &'static str = "integer";
    fn shown(&self) -> String {
        format!("`{self}`")
    }
}

impl Shown for usize {
    const KIND: &'static str = "integer";
    fn shown(&self) -> String {
        format!("`{self}`")
    }
}

impl Shown for bool {
    const KIND: &'static str = "switch";
    fn shown(&self) -> String {
        format!("`{self}`")
    }
}

impl Shown for String {
    const KIND: &'static str = "text";
    fn shown(&self) -> String {
        code_or_empty(self)
    }
}

impl Shown for Secret {
    const KIND: &'static str = "secret";
    fn shown(&self) -> String {
        // A default secret is empty; one that is not never prints.
        if self.expose().is_empty() { "empty".to_owned() } else { "`*****`".to_owned() }
    }
}

impl Shown for SocketAddr {
    const KIND: &'static str = "address";
    fn shown(&self) -> String {
        format!("`{self}`")
    }
}

impl Shown for Span {
    const KIND: &'static str = "duration";
    fn shown(&self) -> String {
        let secs = self.0.as_secs();
        let text = match secs {
            _ if self.0.subsec_millis() != 0 || secs == 0 => format!("{}ms", self.0.as_millis()),
            // Hours up to a week (`24h`, `48h`), as the docs write them; days beyond (`30d`).
            s if s % 86_400 == 0 && s >= 7 * 86_400 => format!("{}d", s / 86_400),
            s if s % 3_600 == 0 => format!("{}h", s / 3_600),
            s if s % 60 == 0 => format!("{}m", s / 60),
            s => format!("{s}s"),
        };
        format!("`{text}`")
    }
}

impl Shown for Vec<String> {
    const KIND: &'static str = "list";
    fn shown(&self) -> String {
        code_or_empty(&self.join(","))
    }
}

impl Shown for Vec<UpstreamEndpoint> {
    const KIND: &'static str = "tables";
    const FILE_ONLY: bool = true;
    fn shown(&self) -> String {
        if self.is_empty() { "none".to_owned() } else { format!("{} endpoints", self.len()) }
    }
}

impl Shown for Vec<ModelAliasSetting> {
    const KIND: &'static str = "tables";
    const FILE_ONLY: bool = true;
    fn shown(&self) -> String {
        if self.is_empty() { "none".to_owned() } else { format!("{} aliases", self.len()) }
    }
}

impl Shown for Option<media::MediaLocation> {
    const KIND: &'static str = "location";
    fn shown(&self) -> String {
        match self {
            None => "empty".to_owned(),
            Some(media::MediaLocation::File(dir)) => format!("`file:{dir}`"),
            Some(media::MediaLocation::S3 { bucket, prefix }) => format!("`s3://{bucket}/{prefix}`"),
        }
    }
}

impl Shown for MediaLinks {
    const KIND: &'static str = "`gateway` or `presigned`";
    fn shown(&self) -> String {
        format!("`{}`", format!("{self:?}").to_ascii_lowercase())
    }
}

impl Shown for LogFormat {
    const KIND: &'static str = "`text` or `json`";
    fn shown(&self) -> String {
        format!("`{}`", format!("{self:?}").to_ascii_lowercase())
    }
}

impl Shown for UsdAmount {
    const KIND: &'static str = "USD";
    fn shown(&self) -> String {
        format!("`{self}`")
    }
}

impl Shown for Targets {
    const KIND: &'static str = "log filter";
    fn shown(&self) -> String {
        code_or_empty(&self.to_string())
    }
}

impl Shown for domain::IpAllowList {
    const KIND: &'static str = "networks";
    fn shown(&self) -> String {
        code_or_empty(&self.to_string())
    }
}
