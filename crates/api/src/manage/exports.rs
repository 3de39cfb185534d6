//! `GET /api/v1/ledger/export` and `GET /api/v1/usage/export`: CSV (RFC 4180: a header line,
//! CRLF line ends, fields quoted when they need it) written with the `csv` crate as the rows come.
//!
//! The first page is read before the answer's head, so a store that cannot be read is a 503 like
//! anywhere else. The rest is read by a background task a page at a time
//! (`service::EXPORT_PAGE_ROWS`), written into one buffer and handed to the body through a channel
//! of two chunks: an export holds one page, one buffer and two chunks however many rows it has, and
//! waits while the client reads slowly. A store failure after the head cuts the body (see
//! `response::StreamError`), so a cut export never looks whole; a client that leaves stops it.

use std::future::Future;

use bytes::Bytes;
use domain::{EndedCall, LedgerEntry};
use http::{HeaderValue, header};
use service::{LedgerExport, ServiceError, UsageExport};
use tokio::sync::mpsc;

use crate::ctx::{Ctx, pairs};
use crate::error::ApiError;
use crate::response::{Response, StreamError};

/// The result of a handler.
type Reply = Result<Response, ApiError>;

/// The ledger export's columns.
pub const LEDGER_COLUMNS: [&str; 7] =
    ["id", "created_at", "kind", "amount_usd", "balance_after_usd", "task_id", "note"];

/// The usage export's columns.
pub const USAGE_COLUMNS: [&str; 10] = [
    "task_id",
    "created_at",
    "ended_at",
    "model",
    "kind",
    "status",
    "billing_status",
    "held_usd",
    "amount_usd",
    "usage",
];

/// Chunks the body may have waiting for the client: what an export buffers besides its page.
const CHUNKS_IN_FLIGHT: usize = 2;

/// An export the writer drains: pages of rows, and each row's fields.
trait Pages: Send + 'static {
    /// A row.
    type Row: Send;
    /// The file's columns.
    const COLUMNS: &'static [&'static str];
    /// The file's name stem (`ledger`, `usage`).
    const NAME: &'static str;
    /// The next page; `None` at the end.
    fn next(&mut self) -> impl Future<Output = Result<Option<Vec<Self::Row>>, ServiceError>> + Send;
    /// The days it covers, as `YYYY-MM-DD` texts.
    fn days(&self) -> (String, String);
    /// Writes `row` as one record.
    fn write(row: &Self::Row, out: &mut csv::Writer<Vec<u8>>) -> csv::Result<()>;
}

impl Pages for LedgerExport {
    type Row = LedgerEntry;
    const COLUMNS: &'static [&'static str] = &LEDGER_COLUMNS;
    const NAME: &'static str = "ledger";

    async fn next(&mut self) -> Result<Option<Vec<LedgerEntry>>, ServiceError> {
        self.next_page().await
    }

    fn days(&self) -> (String, String) {
        (self.range().from.to_string(), self.range().to.to_string())
    }

    fn write(e: &LedgerEntry, out: &mut csv::Writer<Vec<u8>>) -> csv::Result<()> {
        out.write_record([
            e.id.to_string().as_str(),
            &e.created_at.to_string(),
            e.kind.as_str(),
            &e.amount.to_string(),
            &e.balance_after.to_string(),
            e.task_id.as_ref().map_or("", |t| t.as_str()),
            &inert(&e.description),
        ])
    }
}

impl Pages for UsageExport {
    type Row = EndedCall;
    const COLUMNS: &'static [&'static str] = &USAGE_COLUMNS;
    const NAME: &'static str = "usage";

    async fn next(&mut self) -> Result<Option<Vec<EndedCall>>, ServiceError> {
        self.next_page().await
    }

    fn days(&self) -> (String, String) {
        (self.range().from.to_string(), self.range().to.to_string())
    }

    fn write(c: &EndedCall, out: &mut csv::Writer<Vec<u8>>) -> csv::Result<()> {
        out.write_record([
            c.task_id.as_str(),
            &c.created_at.to_string(),
            &c.ended_at.to_string(),
            &c.model,
            c.kind.as_str(),
            c.status.as_str(),
            c.billing.as_str(),
            &c.held.to_string(),
            &c.charged.to_string(),
            c.usage_json.as_deref().unwrap_or(""),
        ])
    }
}

/// Free text as a spreadsheet shows it and never runs it: a note starting with `=`, `+`, `-`, `@`,
/// a tab or a carriage return (what spreadsheets take for a formula) gets a leading `'`, as OWASP's
/// advice on CSV injection says. Only the note is free text; every other column is an id, a time,
/// an amount (whose `-` is a sign, and stays) or JSON.
fn inert(text: &str) -> std::borrow::Cow<'_, str> {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        std::borrow::Cow::Owned(format!("'{text}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// A failure of the gateway itself (a CSV record it could not write), as the envelope's 500.
fn internal(e: impl std::fmt::Display) -> ApiError {
    ServiceError::Internal(e.to_string()).into()
}

/// `rows` as CSV records (after the header line when `header`), with RFC 4180's CRLF line ends.
fn chunk<P: Pages>(header: bool, rows: &[P::Row]) -> Result<Bytes, StreamError> {
    let mut out = csv::WriterBuilder::new().terminator(csv::Terminator::CRLF).from_writer(Vec::new());
    if header {
        out.write_record(P::COLUMNS)?;
    }
    for row in rows {
        P::write(row, &mut out)?;
    }
    Ok(Bytes::from(out.into_inner().map_err(|e| e.into_error())?))
}

/// The CSV answer of `pages`: its first page read now, the rest streamed (see the module text).
async fn csv_answer<P: Pages>(ctx: &Ctx<'_>, mut pages: P) -> Reply {
    let first = pages.next().await?;
    let head = chunk::<P>(true, first.as_deref().unwrap_or_default()).map_err(internal)?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, StreamError>>(CHUNKS_IN_FLIGHT);
    let (from, to) = pages.days();
    let more = first.is_some();
    // Counted with the gateway's background work, so a shutdown waits for it; it ends when the
    // client leaves (the channel closes).
    ctx.gateway().background().spawn(async move {
        if tx.send(Ok(head)).await.is_err() || !more {
            return;
        }
        loop {
            let next = match pages.next().await {
                Ok(Some(rows)) => chunk::<P>(false, &rows),
                Ok(None) => return,
                Err(e) => Err(e.into()),
            };
            let failed = next.as_ref().err().map(ToString::to_string);
            if let Some(error) = &failed {
                tracing::error!(%error, export = P::NAME, "an export broke off");
            }
            // Stops after a failure (the body breaks off with it), or when the client left.
            if tx.send(next).await.is_err() || failed.is_some() {
                return;
            }
        }
    });
    let mut response = http::Response::new(crate::response::channel(rx));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8; header=present"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let disposition = format!("attachment; filename=\"{}-{from}-{to}.csv\"", P::NAME);
    headers.insert(header::CONTENT_DISPOSITION, HeaderValue::from_str(&disposition).map_err(internal)?);
    Ok(response)
}

/// `GET /api/v1/ledger/export`.
pub(crate) async fn ledger(ctx: Ctx<'_>) -> Reply {
    let params = ctx.query()?;
    let export = ctx.gateway().ledger_export(ctx.who()?, pairs(&params))?;
    csv_answer(&ctx, export).await
}

/// `GET /api/v1/usage/export`.
pub(crate) async fn usage(ctx: Ctx<'_>) -> Reply {
    let params = ctx.query()?;
    let export = ctx.gateway().usage_export(ctx.who()?, pairs(&params))?;
    csv_answer(&ctx, export).await
}

#[cfg(test)]
mod tests {
    use super::inert;

    #[test]
    fn a_note_that_looks_like_a_formula_is_shown_not_run() {
        for formula in ["=HYPERLINK(\"http://x\")", "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(inert(formula), format!("'{formula}"), "{formula:?}");
        }
        for plain in ["top-up", "payment cs_test_1", "", "voucher vb_1 (gift)", "a=b"] {
            assert_eq!(inert(plain), plain, "{plain:?}");
        }
    }
}
