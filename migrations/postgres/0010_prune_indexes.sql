-- The periodic prune (`crates/store/src/prune.rs`) deletes old rows in bounded batches, oldest
-- first; each table it prunes gets an index on the age it is pruned by, so that a batch reads only
-- the rows it deletes instead of scanning the whole table.
CREATE INDEX idempotency_claims_created ON idempotency_claims (created_at);
CREATE INDEX native_responses_created ON native_responses (created_at);
-- Only ended deliveries (delivered or given up) are ever pruned; pending ones stay in
-- `webhook_deliveries_due`. Attempts are deleted by their primary key's `delivery_id`.
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (created_at, id)
    WHERE delivered_at IS NOT NULL OR given_up_at IS NOT NULL;
