//! API key scopes: what each key may do.

use std::fmt;
use std::str::FromStr;

use crate::kind::UnknownName;

/// A permission carried by an API key; each operation requires one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// `GET /api/v1/models`.
    ModelsRead,
    /// `GET /api/v1/tasks` and `GET /api/v1/tasks/{task_id}`.
    TaskRead,
    /// `DELETE /api/v1/tasks/{task_id}`.
    TaskWrite,
    /// `POST /api/v1/tasks`.
    VideoCreate,
    /// `POST /api/v1/images/generations`.
    ImageCreate,
    /// `POST /api/v1/chat/completions` and the two native chat endpoints.
    LanguageCreate,
    /// `POST /api/v1/audio/generations`.
    AudioCreate,
    /// `GET /api/v1/overview` and the account's reads (`/usage`, `/ledger`, `GET /keys`).
    OverviewRead,
    /// The caller's own keys and webhook secret: `POST /api/v1/keys`, `DELETE /api/v1/keys/{id}`,
    /// `POST /api/v1/webhook-secret`.
    KeysManage,
    /// The caller's money: `POST /api/v1/vouchers/redeem` (and the account's payments).
    BillingManage,
    /// The operator routes under `/api/v1/admin/`; only keys of users with role `admin` carry it
    /// to effect (a user's key with it is still refused there).
    Admin,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 11] = [
        Scope::ModelsRead,
        Scope::TaskRead,
        Scope::TaskWrite,
        Scope::VideoCreate,
        Scope::ImageCreate,
        Scope::LanguageCreate,
        Scope::AudioCreate,
        Scope::OverviewRead,
        Scope::KeysManage,
        Scope::BillingManage,
        Scope::Admin,
    ];

    /// The wire name, such as `models:read`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::ModelsRead => "models:read",
            Scope::TaskRead => "task:read",
            Scope::TaskWrite => "task:write",
            Scope::VideoCreate => "video:create",
            Scope::ImageCreate => "image:create",
            Scope::LanguageCreate => "language:create",
            Scope::AudioCreate => "audio:create",
            Scope::OverviewRead => "overview:read",
            Scope::KeysManage => "keys:manage",
            Scope::BillingManage => "billing:manage",
            Scope::Admin => "admin",
        }
    }

    /// Parses a comma-separated list such as `models:read,task:read`, dropping duplicates.
    pub fn parse_list(text: &str) -> Result<Vec<Scope>, UnknownName> {
        let mut scopes = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Scope>, _>>()?;
        scopes.sort();
        scopes.dedup();
        Ok(scopes)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownName { what: "scope", value: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_dedup() {
        assert_eq!(Scope::parse_list("task:read, models:read,task:read"), Ok(vec![Scope::ModelsRead, Scope::TaskRead]));
        assert!(Scope::parse_list("models:read,models:write").is_err());
        for s in Scope::ALL {
            assert_eq!(s.as_str().parse::<Scope>(), Ok(s));
        }
    }
}
