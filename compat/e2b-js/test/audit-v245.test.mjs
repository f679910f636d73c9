// e2b 2.45: the methods and options no other suite exercises (issue 13's audit).
import * as sdk from 'e2b-v245'
import { defineAuditSuite } from '../lib/audit.mjs'

// 2.45 does not send network.httpsPorts (it has no such option).
defineAuditSuite('e2b@2.45', sdk, { git: !!sdk.Git, reboot: false, client: !!sdk.E2B })
