//! The settings table of the README, printed from the `settings!` declarations
//! (`gateway settings --markdown`), so the table cannot drift from the code.

use super::Config;

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
    use std::time::Duration;

    use super::*;
    use crate::config::declared::Shown;
    use crate::config::values::{Secret, Span};

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
