-- Per-key client address lists (issue 25): the comma-separated networks (CIDR) a key may be used
-- from; NULL: any address. Changed by `gateway admin key set --allow-ip`.
ALTER TABLE api_keys ADD COLUMN allow_ips TEXT;
