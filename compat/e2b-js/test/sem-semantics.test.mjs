// E2B semantics (auto-resume, pause in progress, list order, proxy
// not-found, template aliases) through e2b 2.20, 2.45 and 2.51.
import * as v220 from 'e2b-v220'
import * as v245 from 'e2b-v245'
import * as v251 from 'e2b-v251'
import { defineSemSuite } from '../lib/sem.mjs'

defineSemSuite('e2b@2.20', v220, { order: false })
defineSemSuite('e2b@2.45', v245)
defineSemSuite('e2b@2.51', v251)
