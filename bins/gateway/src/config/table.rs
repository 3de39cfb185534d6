//! The settings table of the README, printed from the `settings!` declarations
//! (`gateway settings --markdown`), so the table cannot drift from the code.

use std::net::SocketAddr;

use domain::UsdAmount;
use tracing_subscriber::filter::Targets;

use super::values::{LogFormat, MediaLinks, Secret, Span, UpstreamEndpoint};
use super::{Config, PREFIX};

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

/// The first line of the table: what `markdown` writes before the rows.
const HEADER: &str = "| variable | value | default | what it does |\n|---|---|---|---|\n";

/// The README's settings table: a header and one row per setting, in declaration order.
pub fn markdown() -> String {
    let mut out = HEADER.to_owned();
    for s in Config::declared() {
        out.push_str(&format!("| {} | {} | {} | {} |\n", s.variable(), s.kind, s.shown_default(), s.text()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The line before the generated table in `README.md`.
    const START: &str = "<!-- settings: generated from `settings!` by `gateway settings --markdown` -->";
    /// The line after it.
    const END: &str = "<!-- settings: end -->";

    #[test]
    fn every_setting_has_a_doc() {
        for s in Config::declared() {
            assert!(!s.text().is_empty(), "setting {} has no doc comment", s.name);
        }
    }

    #[test]
    fn defaults_print_in_their_written_form() {
        assert_eq!(Span(Duration::from_secs(24 * 3600)).shown(), "`24h`");
        assert_eq!(Span::minutes(5).shown(), "`5m`");
        assert_eq!(Span(Duration::from_secs(30 * 86_400)).shown(), "`30d`");
        assert_eq!(Span(Duration::from_millis(1500)).shown(), "`1500ms`");
        assert_eq!(Secret::default().shown(), "empty");
        let rows = Config::declared();
        let listen = rows.iter().find(|s| s.name == "listen").expect("listen");
        assert_eq!((listen.variable().as_str(), listen.default.as_str()), ("`GATEWAY_LISTEN`", "`127.0.0.1:8080`"));
        let budget = rows.iter().find(|s| s.name == "body_budget_bytes").expect("body_budget_bytes");
        assert_eq!(budget.shown_default(), "`1073741824` (1 GiB)");
    }

    /// Fails when README.md's settings table is not the one `settings!` prints. With
    /// `UPDATE_README=1` it writes the printed table into README.md instead.
    #[test]
    fn the_readme_settings_table_is_generated_from_settings() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(path).expect("README.md");
        let (Some(start), Some(end)) = (readme.find(START), readme.find(END)) else {
            panic!("README.md lacks the lines `{START}` and `{END}` around its settings table");
        };
        let body_start = start + START.len() + 1;
        let table = &readme[body_start..end];
        let printed = markdown();
        if table == printed {
            return;
        }
        if std::env::var_os("UPDATE_README").is_some() {
            let updated = format!("{}{printed}{}", &readme[..body_start], &readme[end..]);
            std::fs::write(path, updated).expect("write README.md");
            return;
        }
        panic!(
            "README.md's settings table differs from the `settings!` declarations in \
             bins/gateway/src/config.rs. Regenerate it with \
             `UPDATE_README=1 cargo test -p gateway --bin gateway the_readme_settings_table`, or paste \
             the output of `cargo run -p gateway -- settings --markdown` between the lines `{START}` \
             and `{END}`."
        );
    }
}
