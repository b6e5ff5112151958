#!/usr/bin/env node
// Runs the TypeScript CLI through tsx's loader, so `npx tollgate …` works from a checkout with no build step.
import { register } from "tsx/esm/api"
register()
await import("../src/cli/main.ts")
