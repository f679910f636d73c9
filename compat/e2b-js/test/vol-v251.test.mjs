// Volumes through e2b v251 (see lib/vol.mjs).
import * as sdk from 'e2b-v251'
import { defineVolumeSuite } from '../lib/vol.mjs'

defineVolumeSuite('e2b@v251', sdk)
