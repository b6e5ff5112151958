import { NodeRuntime } from "@effect/platform-node"
import { Layer } from "effect"
import { SettingsFromEnv } from "./domain/config.ts"
import { ServerLive } from "./server.ts"

NodeRuntime.runMain(Layer.launch(ServerLive.pipe(Layer.provide(SettingsFromEnv))))
