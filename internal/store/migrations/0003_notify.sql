-- Change notifications: every write of a record tells the replicas
-- listening on channel space_changes which one changed, as
-- "<bucket>/<key>", so that they refresh their caches instead of polling.
-- A payload too long for NOTIFY names the bucket alone ("<bucket>/"):
-- listeners then reload the whole bucket.
CREATE FUNCTION space_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    IF TG_TABLE_NAME = 'sandboxes' THEN
        IF TG_OP = 'DELETE' THEN
            payload := 'sandboxes/' || OLD.id;
        ELSE
            payload := 'sandboxes/' || NEW.id;
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        payload := OLD.bucket || '/' || OLD.key;
    ELSE
        payload := NEW.bucket || '/' || NEW.key;
    END IF;
    IF octet_length(payload) > 7900 THEN
        payload := split_part(payload, '/', 1) || '/';
    END IF;
    PERFORM pg_notify('space_changes', payload);
    RETURN NULL;
END
$$;
CREATE TRIGGER sandboxes_notify AFTER INSERT OR UPDATE OR DELETE ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION space_notify_change();
CREATE TRIGGER records_notify AFTER INSERT OR UPDATE OR DELETE ON records
    FOR EACH ROW EXECUTE FUNCTION space_notify_change();
