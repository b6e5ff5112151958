import { NodeRuntime } from "@effect/platform-node"
import { Layer } from "effect"
import { SettingsFromEnv } from "./domain/config.ts"
import { ServerLive } from "./server.ts"

// JSON logs come from ServerLive (Logger.json); the pretty logger would print every line twice.
NodeRuntime.runMain(Layer.launch(ServerLive.pipe(Layer.provide(SettingsFromEnv))), { disablePrettyLogger: true })
