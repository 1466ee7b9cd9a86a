# The periodic entries page's unmanaged model: no table, only a content type and permissions.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('zset_scheduler', '0001_initial'),
    ]

    operations = [
        migrations.CreateModel(
            name='PeriodicEntry',
            fields=[
                ('id', models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'verbose_name': 'periodic entry',
                'verbose_name_plural': 'periodic entries',
                'managed': False,
                'default_permissions': ('view', 'change'),
            },
        ),
    ]
