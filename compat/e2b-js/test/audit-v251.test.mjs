// e2b 2.51: the methods and options no other suite exercises (issue 13's audit).
import * as sdk from 'e2b-v251'
import { defineAuditSuite } from '../lib/audit.mjs'

defineAuditSuite('e2b@2.51', sdk, { git: true, reboot: true, client: true, httpsPorts: true })
