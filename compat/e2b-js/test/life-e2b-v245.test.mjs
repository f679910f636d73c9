// The lifecycle lane's cases (pause without memory, metrics over time,
// mcp) through e2b 2.45.
import * as sdk from 'e2b-v245'
import { defineLifeSuite } from '../lib/life-suite.mjs'

defineLifeSuite('e2b@2.45', sdk)
