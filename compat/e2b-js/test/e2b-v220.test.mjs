// e2b 2.20: v1 create/connect (POST /sandboxes, /sandboxes/{id}/connect).
import * as sdk from 'e2b-v220'
import { defineSuite } from '../lib/suite.mjs'

defineSuite('e2b@2.20', sdk)
