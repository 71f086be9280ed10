-- A close asked through one node's API for a tunnel's members on other nodes is written on
-- their rows before the `close` notification goes out, and a node ends a member only when its
-- row says so. A notification is a hint, never an order: any role that may connect to the
-- database can send one on the cluster's channel, with no grant on any table.
alter table cluster_members add column close_reason text;
